"""Compatibility path (``docs/architecture.md``): grading with a model judge moved to :mod:`ares_cli.grading.judge_grading`; this old path
is that module itself. Project code imports from the new one."""

import sys

from ares_cli.grading import judge_grading

sys.modules[__name__] = judge_grading
