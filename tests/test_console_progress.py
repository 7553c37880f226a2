"""Progress on stderr: a rich bar with rate, ETA and phase on a TTY, plain lines otherwise, nothing with -q."""

from __future__ import annotations

import io

from rich.console import Console

from ares_cli.console import GlobalOptions


def _opts(terminal: bool, verbosity: int = 0) -> tuple[GlobalOptions, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, force_terminal=terminal, width=160, color_system=None)
    return GlobalOptions(verbosity=verbosity, _console=console), out


def test_bar_on_a_terminal_shows_count_rate_eta_and_phase():
    opts, out = _opts(terminal=True)
    with opts.progress("rl", unit="steps") as bar:
        bar.update(3, total=10)
        bar.phase("generate")
        bar.update(4)
        opts.log("step 4/10 | reward 0.5")
    text = out.getvalue()
    assert "rl" in text and "4/10" in text and "steps" in text and "generate" in text
    assert "eta" in text and "step 4/10 | reward 0.5" in text


def test_sampling_callback_on_a_terminal_draws_the_bar():
    opts, out = _opts(terminal=True)
    with opts.progress("passrate", unit="problems") as bar:
        bar(8, 32, 1.0)
        bar(16, 32, 2.0)
    assert "16/32" in out.getvalue() and "problems" in out.getvalue()
    assert "problems  2.0s" not in out.getvalue()  # no plain counting line on a terminal


def test_plain_lines_without_a_terminal():
    opts, out = _opts(terminal=False)
    with opts.progress("passrate", unit="problems") as bar:
        bar(8, 32, 1.25)
        bar.update(9, total=32, phase="generate")  # the training loops log their own lines
    assert out.getvalue() == "  8/32 problems  1.2s\n"


def test_quiet_silences_bar_and_lines():
    for terminal in (True, False):
        opts, out = _opts(terminal=terminal, verbosity=-1)
        with opts.progress("eval", unit="problems") as bar:
            bar(1, 2, 0.5)
            bar.update(2, total=2, phase="grade")
        assert out.getvalue() == ""


class _Recorder:
    def __init__(self):
        self.updates, self.phases = [], []

    def update(self, completed, *, total=None, phase=None):
        self.updates.append((completed, total))

    def phase(self, name):
        if not self.phases or self.phases[-1] != name:
            self.phases.append(name)


def test_rl_loop_reports_steps_and_phases(tiny_model_dir, tmp_path):
    from test_rl import _cfg, _problems

    from ares_cli.data.loader import load_problems
    from ares_cli.training.rl.trainer import train_rl

    bar = _Recorder()
    train_rl(_cfg("algo=grpo", "val.every=2"), model_path=tiny_model_dir, problems=_problems(),
             val_problems=load_problems("toy-val", limit=2).records, out_dir=tmp_path, log=lambda _m: None,
             progress=bar)  # fmt: skip
    assert bar.updates == [(0, 2), (1, None), (2, None)]
    assert bar.phases[:5] == ["validate", "generate", "grade", "generate", "forward"]
    assert {"backward", "validate"} <= set(bar.phases[5:])


def test_sft_loop_reports_steps(tiny_chars_model_dir, tmp_path):
    from fixtures_tiny_model import write_sft_jsonl

    from ares_cli.training.sft import SFTConfig, train_sft

    bar = _Recorder()
    cfg = SFTConfig(max_steps=2, batch_size=4, micro_batch_size=4, max_seq_len=96, save_every=0)
    train_sft(cfg, model_path=tiny_chars_model_dir, data_path=write_sft_jsonl(tmp_path / "d.jsonl", 8),
              out_dir=tmp_path / "out", log=lambda _m: None, progress=bar)  # fmt: skip
    assert bar.updates == [(0, 2), (1, None), (2, None)]
