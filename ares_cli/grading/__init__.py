"""Answer extraction and grading: math-verify and other graders in killable worker processes."""

from ares_cli.grading.cache import GradeCache
from ares_cli.grading.extract import boxed_spans, extract_boxed
from ares_cli.grading.graders import CORRECT, ERROR, GRADES, INCORRECT, INVALID, TIMEOUT
from ares_cli.grading.pool import GradeResult, GradingPool
from ares_cli.grading.registry import GraderRegistry, GraderSpec, default_registry, resolve_grader

__all__ = [
    "CORRECT",
    "ERROR",
    "GRADES",
    "INCORRECT",
    "INVALID",
    "TIMEOUT",
    "GradeCache",
    "GradeResult",
    "GraderRegistry",
    "GraderSpec",
    "GradingPool",
    "boxed_spans",
    "default_registry",
    "extract_boxed",
    "resolve_grader",
]
