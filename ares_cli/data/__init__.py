"""Problem datasets: records and validation, JSONL I/O, field maps, manifests and the one loader."""

from ares_cli.data.fieldmap import FieldMap
from ares_cli.data.jsonl import read_jsonl, write_jsonl
from ares_cli.data.loader import LoadedDataset, load_problems
from ares_cli.data.manifests import Manifest, list_manifests, load_manifest
from ares_cli.data.records import validate_problems

__all__ = [
    "FieldMap",
    "LoadedDataset",
    "Manifest",
    "list_manifests",
    "load_manifest",
    "load_problems",
    "read_jsonl",
    "validate_problems",
    "write_jsonl",
]
