"""AEPO (ARES) through the same hooks as the baselines (see :mod:`.algos`).

AEPO per step (ARES sec. 3.2, algorithm 1): from the no-grad pass's full-vocabulary entropy, window
entropy -> batch threshold tau (global) -> HWE mask and N_HE -> online bucket of each prompt from its
group's pass count -> hierarchical reward (after bucketing; :func:`aepo_rewards`) and optionally the
token bonus psi -> KL-loss weights kappa_d * beta_d * rho on the relaxed tokens (every token of a flagged
window, ``aepo.kl_scope="window"``, or only its start, ``"start"``) -> after the step, each bucket's kappa_d
is driven by the KL of its *non-relaxed* tokens (old policy vs reference, global over ranks). Ablations
(ARES table 5): ``aepo.reward_shaping=false`` keeps the accuracy reward; ``aepo.dynamic_kl=false`` uses
the uniform weight ``kl_init`` on every token and never moves kappa_d.
"""

from __future__ import annotations

from ares_cli.training.rl.algos import Algorithm, group_correct


class AEPO(Algorithm):
    reads_old_stats = True  # prepare reads the old policy's entropies and log-probs

    def __init__(self, cfg, reduce, gather=None):
        from ares_cli.algorithms.aepo_kl import kl_controller_from_config
        from ares_cli.algorithms.aepo_reward import target_tracker_from_config
        from ares_cli.algorithms.controllers import ThresholdEMA

        super().__init__(cfg, reduce, gather)
        a = cfg.aepo
        self.tracker = target_tracker_from_config(a, all_reduce=reduce)
        self.kl_ctrl = kl_controller_from_config(a, all_reduce=reduce)
        self.tau_ema = ThresholdEMA(a.threshold_ema_decay) if a.threshold_mode == "ema" else None
        self._trigger_ids: set[int] | None = None
        self._det = None

    def controllers(self):
        out = {"aepo_kl": self.kl_ctrl, "aepo_target": self.tracker}
        return out | ({"aepo_threshold": self.tau_ema} if self.tau_ema is not None else {})

    def _trigger(self, batch, ids):
        from ares_cli.algorithms.aepo import trigger_mask, trigger_token_ids

        if not self.cfg.aepo.use_trigger_vocab:
            return None
        if self._trigger_ids is None:
            self._trigger_ids = trigger_token_ids(batch.meta.tokenizer, self.cfg.aepo.trigger_words)
        return trigger_mask(ids, self._trigger_ids)

    def prepare(self, batch):
        from dataclasses import replace

        from ares_cli.algorithms.aepo import detect_hwe
        from ares_cli.algorithms.buckets import bucket_ids
        from ares_cli.training.rl import trajectory

        a, mask = self.cfg.aepo, batch.response_mask
        # per-trajectory statistics (threshold quantiles, windows, N_HE, length) over whole trajectories: a
        # branch row's shared prefix counts; the token masks are then taken on the row's trained positions
        ent, traj_mask = trajectory.view(batch, batch.tok.old_entropy)
        ids, _ = trajectory.view(batch, batch.response_ids)
        full = detect_hwe(ent, traj_mask, a, ema=self.tau_ema, trigger=self._trigger(batch, ids),
                          all_reduce=self.reduce, all_gather=self.gather)  # fmt: skip
        det = replace(full, window_entropy=trajectory.own(batch, full.window_entropy),
                      hwe=trajectory.own(batch, full.hwe), covered=trajectory.own(batch, full.covered))  # fmt: skip
        n_correct, size = group_correct(batch)
        batch.seq.bucket = bucket_ids(n_correct, size, a.easy_pass_frac, a.hard_pass_frac)
        batch.seq.n_he = det.n_he
        batch.seq.trajectory_len = traj_mask.sum(1)
        batch.tok.hwe = det.hwe.float()
        # the KL-relaxed tokens (eq. 1's W^valid): every token of a flagged window, or only its start
        batch.tok.kl_relaxed = (det.covered if a.kl_scope == "window" else det.hwe).float()
        self._det, self._trajectory = det, (full.hwe, traj_mask)
        n_tok = float(mask.sum().clamp(min=1))
        return {"aepo/threshold": float(det.threshold), "aepo/threshold_batch": float(det.batch_threshold),
                "aepo/relaxed_frac": float(batch.tok.kl_relaxed.sum()) / n_tok}  # fmt: skip

    def rewards(self, batch):
        from ares_cli.algorithms.aepo_reward import aepo_rewards, token_bonus

        a, det, buckets = self.cfg.aepo, self._det, batch.seq.bucket
        base = batch.seq.base_reward
        if not a.reward_shaping:  # ablation: plain accuracy reward, the target tracker never moves
            self._shaping = None
            return base, None, {"aepo/shaping_abs_mean": 0.0}
        out = aepo_rewards(base, batch.seq.correct.bool(), det.n_he, buckets, self.tracker, a,
                           groups=batch.group, lengths=batch.seq.trajectory_len)  # fmt: skip
        bonus = None
        if a.token_bonus:
            bonus = token_bonus(det.window_entropy, det.hwe, batch.response_mask, buckets, out.lam,
                                det.threshold, phi=a.token_bonus_phi, baseline=a.token_bonus_baseline)  # fmt: skip
        self._shaping = out
        shift = (out.reward - base.float()).abs()
        return out.reward, bonus, {"aepo/shaping_abs_mean": float(shift.mean()) if len(shift) else 0.0,
                                   **out.metrics}  # fmt: skip

    def kl_weights(self, batch):
        from ares_cli.algorithms.aepo_kl import aepo_kl_coef

        return aepo_kl_coef(batch.tok.kl_relaxed, batch.response_mask, batch.seq.bucket, self.kl_ctrl.kappa,
                            self.cfg.aepo)  # fmt: skip

    def after_step(self, batch):
        from ares_cli.algorithms.aepo_kl import aepo_step_metrics, nonwindow_kl_stats
        from ares_cli.algorithms.kl import kl_estimate

        kl_ctrl, dynamic = None, self.cfg.aepo.dynamic_kl
        if (
            batch.tok.ref_logprob is not None
        ):  # measured with or without the controller (the ablation logs it too)
            kl = self.cfg.kl
            kld = kl_estimate(batch.tok.old_logprob, batch.tok.ref_logprob, kind=kl.estimator, clamp=kl.clamp,
                              log_ratio_clamp=kl.log_ratio_clamp)  # fmt: skip
            local = nonwindow_kl_stats(kld, batch.tok.kl_relaxed, batch.response_mask, batch.seq.bucket,
                                       self.cfg.aepo.kl_ctrl_signal)  # fmt: skip
            if dynamic:
                self.kl_ctrl.update(*local)  # the controller all-reduces the local sums itself
            kl_ctrl = tuple(self.reduce(t.clone()) for t in local)
        s = self._shaping  # None without reward shaping: no target / lambda metrics
        moments, target, lam = (s.moments, s.target, s.lam) if s is not None else (None, None, None)
        hwe, mask = self._trajectory  # N_HE and lengths per trajectory, as the reward saw them
        return aepo_step_metrics(threshold=self._det.threshold, hwe=hwe, mask=mask,
                                 buckets=batch.seq.bucket, moments=moments, target=target, lam=lam,
                                 kappa=self.kl_ctrl.kappa if dynamic else None, kl_ctrl=kl_ctrl,
                                 batch_threshold_value=self._det.batch_threshold)  # fmt: skip
