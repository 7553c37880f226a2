"""Compatibility path (``docs/architecture.md``): the policy loss's aggregations moved to :mod:`ares_cli.algorithms.loss_aggregation`; this old path
is that module itself. Project code imports from the new one."""

import sys

from ares_cli.algorithms import loss_aggregation

sys.modules[__name__] = loss_aggregation
