"""Mutation run over the conventions of the loss, KL, advantage and aggregation code: every mutant below breaks
one documented convention (docs/methods.md's tables, the modules' docstrings), and each must make some test
fail. Prints JSON: per mutant whether it applied and whether a test caught it, then the totals.

    .venv/bin/python tests/mutants.py                   # every mutant against the working tree's tests
    .venv/bin/python tests/mutants.py --rev b5475ec     # the same mutants against an older commit's code and tests
    .venv/bin/python tests/mutants.py --only kl_k3_log_ratio_clamp_ignored --list

A mutant names the function (or class, or ``Class.method``) it edits and a piece of its source text, found by
content anywhere under ``ares_cli/`` (never by file or line number), so the list survives modules being moved
or renamed; the text must occur exactly once in exactly one such scope, or the run reports the mutant as stale.
Each run works on a copy of the tree (``--rev``: ``git archive``), so the sources are never touched; the copy's
tests run with ``pytest -x`` and the mutant is caught when they fail.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ["tests/test_conventions.py", "tests/test_policy_losses.py", "tests/test_gspo.py", "tests/test_kl.py",
         "tests/test_advantages.py", "tests/test_aggregation.py", "tests/test_reference_parity.py"]  # fmt: skip
DESELECT = "not through_the_cli"  # the two-step CLI run of test_gspo: slow, and covered by the unit tests
COPY_IGNORE = shutil.ignore_patterns(".venv", ".git", "artifacts", "__pycache__", "*.egg-info", ".ruff_cache")


@dataclass(frozen=True)
class Mutant:
    id: str
    convention: str  # what it breaks, as documented
    scope: str  # function, class or Class.method whose source holds ``find``
    find: str
    replace: str
    older: tuple[tuple[str, str, str], ...] = ()  # (scope, find, replace) for an older shape of the same code


M = Mutant
MUTANTS: list[Mutant] = [
    # ---- KL (kl.py; methods.md "KL estimators", conventions "k3 KL clamps") ------------------------------
    M("kl_k3_log_ratio_clamp_ignored", "k3's d is clamped to +-kl.log_ratio_clamp before exp", "kl_estimate",
      "d = d.clamp(-log_ratio_clamp, log_ratio_clamp)", "d = d"),
    M("kl_k3_clamp_ignored", "k3 is clamped to +-kl.clamp", "kl_estimate",
      "return kl if clamp is None else kl.clamp(-clamp, clamp)", "return kl"),
    M("kl_k3_clamp_always", "kl.clamp=null turns k3's clamp off (TRL)", "kl_estimate",
      "return kl if clamp is None else kl.clamp(-clamp, clamp)", "return kl.clamp(-10.0, 10.0)"),
    M("kl_k2_clamped", "only k3 is clamped (k2 keeps its gradient past |d| > 4.47)", "kl_estimate",
      "return 0.5 * d.square()", "return (0.5 * d.square()).clamp(-10.0, 10.0)"),
    M("kl_k1_sign", "k1 = -d, d = log pi_ref - log pi", "kl_estimate", "return -d", "return d"),
    M("kl_k3_off_by_one", "k3 = e^d - d - 1", "kl_estimate", "torch.expm1(d) - d", "torch.exp(d) - d"),
    M("kl_weights_ignored", "the KL term is coef * Agg(w * KL) (ARES eq. 1-2)", "kl_loss",
      "aggregation(kl * w, mask)", "aggregation(kl, mask)"),
    M("kl_padding_not_selected", "a NaN at padding reaches no KL gradient", "kl_loss",
      "logprob, ref_logprob, weights = masked_inputs(mask, logprob, ref_logprob, weights)", "pass"),
    # ---- the trainer's call of the loss and KL (update.py) ----------------------------------------------
    M("trainer_drops_kl_clamps", "the trainer passes kl.clamp and kl.log_ratio_clamp", "_micro_loss",
      "clamp=cfg.kl.clamp, log_ratio_clamp=cfg.kl.log_ratio_clamp", ""),
    M("trainer_ignores_kl_estimator", "the trainer uses kl.estimator", "_micro_loss",
      "kind=cfg.kl.estimator", 'kind="k3"'),
    M("trainer_ignores_kl_weights", "AEPO's token KL weights reach the KL term", "_micro_loss",
      'weights=micro.tok.kl_weight', "weights=None"),
    M("trainer_drops_entropy", "the entropy bonus gets the loss forward's entropy", "_micro_loss",
      "extras=LossExtras(entropy=stats.entropy, generator=generator)", "extras=LossExtras(generator=generator)"),
    M("trainer_advantage_eps", "loss.adv_eps reaches the estimator", "step_advantages",
      "eps=loss.adv_eps", "eps=1e-6"),
    # ---- policy losses (policy_loss_core.py, policy_losses.py, gspo.py) --------------------------------
    M("log_ratio_clamp_ignored", "the policy log-ratio is clamped to +-loss.log_ratio_clamp", "token_ratio",
      "clamp_log_ratio(logprob - old_logprob.detach(), config)", "logprob - old_logprob.detach()"),
    M("cispo_log_ratio_clamp_ignored", "loss.log_ratio_clamp applies to cispo", "cispo_loss",
      "log_ratio, ratio = token_ratio(logprob, old_logprob, config)",
      "log_ratio = logprob - old_logprob.detach(); ratio = log_ratio.exp()"),
    M("kl_cov_log_ratio_clamp_ignored", "loss.log_ratio_clamp applies to kl_cov", "kl_cov_loss",
      "log_ratio, ratio = token_ratio(logprob, old_logprob, config)",
      "log_ratio = logprob - old_logprob.detach(); ratio = log_ratio.exp()"),
    M("gspo_log_ratio_clamp_ignored", "GSPO's log s_i is clamped to +-loss.log_ratio_clamp", "sequence_log_ratio",
      "return clamp_log_ratio(total / valid.sum(-1).clamp(min=1).to(total.dtype), config)",
      "return total / valid.sum(-1).clamp(min=1).to(total.dtype)"),
    M("gspo_not_length_normalised", "s_i = exp((1/|y_i|) sum_t log r_it) (GSPO eq. 7)", "sequence_log_ratio",
      "total / valid.sum(-1).clamp(min=1).to(total.dtype)", "total"),
    M("gspo_token_value", "s_it has the value of s_i (GSPO eq. 13)", "gspo_token_loss",
      "(log_s[:, None] + logprob - logprob.detach()).exp()", "(logprob - old_logprob).exp()"),
    M("dual_clip_ignored", "dual clip min(., -c A) on A < 0, c = loss.dual_clip", "clipped_surrogate",
      "if config.dual_clip is not None:", "if False:"),
    M("dual_clip_on_positive", "the dual clip acts on A < 0 only", "clipped_surrogate",
      "pg = torch.where(a < 0, torch.minimum(pg, pg3), pg)", "pg = torch.minimum(pg, pg3)"),
    M("clip_bounds_swapped", "ratio clipped to [1 - clip_low, 1 + clip_high]", "clipped_surrogate",
      "ratio.clamp(1.0 - config.clip_low, 1.0 + config.clip_high)",
      "ratio.clamp(1.0 - config.clip_high, 1.0 + config.clip_low)"),
    M("ppo_min_not_max", "PPO takes max(-A r, -A clip(r))", "clipped_surrogate",
      "pg = torch.maximum(pg1, pg2)", "pg = torch.minimum(pg1, pg2)"),
    M("cispo_lower_bound_ignored", "cispo_eps_low bounds the IS weight below (PAEC in verl: [1, 6])",
      "cispo_loss", "lo = None if config.cispo_eps_low is None else 1.0 - config.cispo_eps_low", "lo = None"),
    M("cispo_cap_is_eps_high", "the CISPO cap is 1 + eps_high (MiniMax-M1, verl; TRL's eps_high is the cap)",
      "cispo_loss", "max=1.0 + config.cispo_eps_high", "max=config.cispo_eps_high"),
    M("cispo_weight_not_detached", "CISPO's clipped weight is detached: the gradient is -w A grad log pi",
      "cispo_loss", "w = ratio.detach().clamp(", "w = ratio.clamp("),
    M("cispo_default_one_sided", "cispo's default is PAEC's verl reading, eps_low = 0", "PolicyLossConfig",
      "cispo_eps_low: float | None = option(\n        0.0,", "cispo_eps_low: float | None = option(\n        None,"),
    M("clip_cov_counts_clipped_tokens", "Clip-Cov's candidates exclude tokens whose clipped branch is active",
      "clip_cov_loss", "band = valid & ~clip_active &", "band = valid &"),
    M("cov_selection_floor_zero", "Clip-Cov / KL-Cov select max(1, floor(ratio n)) tokens", "_n_select",
      "max(1, int(ratio * n_valid))", "int(ratio * n_valid)"),
    M("kl_cov_smallest_covariance", "KL-Cov penalises the top tokens by covariance", "kl_cov_loss",
      "torch.topk(cov, k).indices", "torch.topk(cov, k, largest=False).indices"),
    M("kl_cov_no_abs", "KL-Cov's term is coef * |log r|", "kl_cov_loss",
      "(logprob - old_logprob.detach()).abs()", "(logprob - old_logprob.detach())"),
    M("covariance_unmasked_means", "the covariance's means are over the valid tokens", "covariance",
      "cov = (a - masked_mean(a, mask)) * (lp - masked_mean(lp, mask))", "cov = (a - a.mean()) * (lp - lp.mean())"),
    M("top_entropy_floor", "80/20 keeps the ceil(frac n) highest", "top_entropy_mask",
      "max(1, math.ceil(frac * n))", "max(1, math.floor(frac * n))"),
    M("top_entropy_quantile_no_lerp", "the quantile rule interpolates linearly (TRL's torch.quantile)",
      "top_entropy_mask", "thr = torch.lerp(srt[lo], srt[hi], torch.tensor(pos - lo, dtype=srt.dtype))",
      "thr = srt[lo]"),
    M("entropy_scope_ignored", "loss.entropy_scope=kept puts the bonus on the kept tokens only (TRL)", "finish",
      "bonus = select(entropy, keep) if scoped else entropy", "bonus = entropy"),
    M("entropy_token_mean_ignored", "loss.entropy_aggregation=token_mean: the bonus is the token mean (TRL)",
      "finish", 'if config.entropy_coef and config.entropy_aggregation == "token_mean":', "if False:"),
    M("entropy_bonus_sign", "the bonus lowers the loss: loss -= coef * H", "finish",
      "loss = aggregation(pg - config.entropy_coef * bonus, mask)",
      "loss = aggregation(pg + config.entropy_coef * bonus, mask)",
      (("finish", "loss = aggregation(pg - config.entropy_coef * extras.entropy, mask)",
        "loss = aggregation(pg + config.entropy_coef * extras.entropy, mask)"),)),
    M("token_weights_ignored", "per-token weights multiply the PG term", "finish",
      "pg = pg * torch.broadcast_to(weights.detach().to(pg.dtype), pg.shape)", "pg = pg",
      (("finish", "pg = pg * torch.broadcast_to(extras.token_weights.detach().to(pg.dtype), pg.shape)", "pg = pg"),)),
    M("loss_padding_not_selected", "padded inputs are set to 0 before the arithmetic (no NaN gradient)",
      "masked_inputs", "else select(t, valid)", "else t"),
    # ---- aggregation (aggregation.py; methods.md "masking", conventions "Dr.GRPO's normaliser") -----------
    M("aggregation_multiplies_by_mask", "padding is removed by a select, never by multiplying",
      "Aggregation.__call__",
      "masked = torch.where(\n            mask.bool(), per_token, torch.zeros((), dtype=per_token.dtype, device=per_token.device)\n        )",
      "masked = per_token * m"),
    M("token_mean_local_count", "token_mean divides by the global token count", "token_mean",
      "max(agg.global_tokens, 1.0)", "max(float(m.sum()), 1.0)",
      (("Aggregation.__call__", "masked.sum() / max(self.global_tokens, 1.0)", "masked.sum() / max(float(m.sum()), 1.0)"),)),
    M("seq_mean_padded_length", "seq_mean_token_mean divides each row by its own token count",
      "seq_mean_token_mean", "masked.sum(-1) / m.sum(-1).clamp(min=1.0)", "masked.sum(-1) / m.shape[-1]",
      (("Aggregation.__call__", "masked.sum(-1) / m.sum(-1).clamp(min=1.0)", "masked.sum(-1) / m.shape[-1]"),)),
    M("seq_sum_constant_no_nseq", "Dr.GRPO's normaliser is N_seq * L_max", "seq_sum_constant",
      "(max(agg.global_sequences, 1.0) * float(agg.max_length))", "float(agg.max_length)",
      (("Aggregation.__call__", "(max(self.global_sequences, 1.0) * float(self.max_length))",
        "float(self.max_length)"),)),
    M("empty_rows_counted", "a row without loss tokens is not counted in N_seq", "local_counts",
      "float((m.sum(-1) > 0).sum())", "float(m.shape[0])"),
    # ---- advantages (advantages.py; conventions "epsilon", "batch-level scaling", "singleton groups") ------
    M("grpo_std_biased", "std=unbiased divides by n - 1 (torch.std, TRL, verl)", "group_moments",
      'denom = (count - 1).clamp(min=1) if std == "unbiased" else count', "denom = count"),
    M("grpo_eps_ignored", "loss.adv_eps is the epsilon of the std division", "grpo",
      "(gstd[idx] + eps)", "(gstd[idx] + 1e-6)"),
    M("group_stats_float32", "group statistics in float64: an all-equal group gets exactly 0", "_prepare",
      "r = rewards.detach().to(torch.float64)", "r = rewards.detach().to(torch.float32)"),
    M("drgrpo_divides_by_std", "Dr.GRPO does not divide by the std", "drgrpo",
      "adv = r - mean[idx]", "adv = (r - mean[idx]) / (gstd[idx] + eps)"),
    M("batch_std_of_centred", "group_mean_batch_std divides by the std of the raw rewards (TRL)",
      "group_mean_batch_std", "_batch_std(r, torch.ones_like(r), std, reduce)",
      "_batch_std(r - mean[idx], torch.ones_like(r), std, reduce)"),
    M("centred_std_of_raw", "group_mean_centred_std divides by the std of the centred rewards",
      "group_mean_centred_std", "_batch_std(c, torch.ones_like(c), std, reduce)",
      "_batch_std(r, torch.ones_like(c), std, reduce)"),
    M("batch_std_one_rank", "batch statistics are summed over ranks", "_summed",
      "return values if reduce is None else reduce(values.clone())", "return values"),
    M("rpp_eps_outside_root", "REINFORCE++-baseline: eps inside the root, sqrt(var + eps) (verl)",
      "reinforce_pp_baseline", "torch.sqrt(sigma**2 + eps)", "(sigma + eps)"),
    M("rpp_not_token_weighted", "REINFORCE++-baseline whitens over tokens (weights L_i)", "reinforce_pp_baseline",
      "_batch_std(c, lengths.to(r.dtype),", "_batch_std(c, torch.ones_like(c),"),
    M("rpp_no_mean_shift", "REINFORCE++-baseline shifts by the token mean", "reinforce_pp_baseline",
      "adv = (c - mu) /", "adv = c /"),
    M("rpp_not_bessel", "REINFORCE++-baseline's variance is Bessel-corrected over tokens",
      "reinforce_pp_baseline", '_batch_std(c, lengths.to(r.dtype), "unbiased", reduce)',
      '_batch_std(c, lengths.to(r.dtype), "biased", reduce)'),
    M("singleton_verl_ignored", "singleton='verl' gives a group of one mean 0 and std 1", "group_moments",
      'if singleton == "verl":', "if False:"),
]  # fmt: skip


def _scopes(tree: ast.AST, prefix: str = ""):
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{node.name}"
            yield name, node
            yield from _scopes(node, f"{name}.")


def locate(root: Path, mutant: Mutant) -> tuple[Path, str] | str:
    """(file, its mutated text), or why the mutant does not apply: its text must occur exactly once in
    exactly one scope named ``mutant.scope`` under ``root/ares_cli`` (else the ``older`` shapes are tried)."""
    found = _locate(root, mutant.scope, mutant.find, mutant.replace)
    for scope, find, replace in mutant.older:
        if not isinstance(found, str):
            break
        found = _locate(root, scope, find, replace)
    return found


def _locate(root: Path, scope: str, find: str, replace: str) -> tuple[Path, str] | str:
    hits = []
    for path in sorted((root / "ares_cli").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if find not in text:
            continue
        starts = [0]
        for line in text.splitlines(keepends=True):
            starts.append(starts[-1] + len(line))
        for name, node in _scopes(ast.parse(text)):
            if name != scope and not name.endswith(f".{scope}"):
                continue
            lo, hi = starts[node.lineno - 1], starts[node.end_lineno]
            if text[lo:hi].count(find) == 1:
                segment = text[lo:hi].replace(find, replace, 1)
                hits.append((path, text[:lo] + segment + text[hi:]))
    if len(hits) != 1:
        return f"{len(hits)} places match"
    path, mutated = hits[0]
    try:
        ast.parse(mutated)
    except SyntaxError as err:
        return f"the mutated source does not parse: {err}"
    return hits[0]


def make_tree(rev: str | None, dest: Path) -> Path:
    """A copy of the working tree, or of commit ``rev``, under ``dest``."""
    tree = dest / "tree"
    if rev is None:
        shutil.copytree(ROOT, tree, ignore=COPY_IGNORE)
    else:
        tree.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def run_tests(tree: Path, tests: list[str], timeout: float) -> tuple[int, str]:
    """pytest -x over ``tests`` in ``tree`` (its package first on the path); (return code, first failure)."""
    present = [t for t in tests if (tree / t).exists()]
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-k", DESELECT, *present]
    try:
        out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, "timeout"
    failed = next((line for line in out.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))), "")
    return out.returncode, failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rev", help="mutate this commit's code and run its tests (default: the working tree)"
    )
    parser.add_argument("--only", help="comma-separated mutant ids")
    parser.add_argument(
        "--tests", nargs="+", default=TESTS, help="test files (paths from the repository root)"
    )
    parser.add_argument(
        "--timeout", type=float, default=900, help="seconds per test run (a timeout counts as caught)"
    )
    parser.add_argument("--list", action="store_true", help="only check that each mutant applies")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.only or m.id in args.only.split(",")]
    results = []
    with tempfile.TemporaryDirectory(prefix="ares-mutants-") as tmp:
        tree = make_tree(args.rev, Path(tmp))
        if not args.list:
            rc, failed = run_tests(tree, args.tests, args.timeout)
            if rc != 0:
                print(json.dumps({"error": "the unmutated tests fail", "rc": rc, "first_failure": failed}))
                return 1
        for m in chosen:
            row = {"id": m.id, "convention": m.convention, "scope": m.scope}
            where = locate(tree, m)
            if isinstance(where, str):
                results.append(row | {"applied": False, "why": where})
                continue
            path, mutated = where
            row |= {"applied": True, "file": str(path.relative_to(tree))}
            if not args.list:
                original = path.read_text(encoding="utf-8")
                path.write_text(mutated, encoding="utf-8")
                start = time.perf_counter()
                try:
                    rc, failed = run_tests(tree, args.tests, args.timeout)
                finally:
                    path.write_text(original, encoding="utf-8")
                row |= {
                    "caught": rc != 0,
                    "rc": rc,
                    "first_failure": failed,
                    "s": round(time.perf_counter() - start, 1),
                }
            results.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    applied = [r for r in results if r["applied"]]
    summary = {
        "rev": args.rev or "working tree",
        "tests": args.tests,
        "mutants": len(results),
        "applied": len(applied),
    }
    if not args.list:
        survivors = [r["id"] for r in applied if not r["caught"]]
        summary |= {"caught": len(applied) - len(survivors), "survived": survivors}
    summary["not_applied"] = {r["id"]: r["why"] for r in results if not r["applied"]}
    print(json.dumps({"summary": summary, "mutants": results}, indent=1))
    stale = args.rev is None and summary["not_applied"]
    return 1 if stale or (not args.list and summary["survived"]) else 0


if __name__ == "__main__":
    sys.exit(main())
