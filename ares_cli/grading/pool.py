"""GradingPool: graders in killable worker processes with a hard per-sample timeout and a grade cache.

A stuck worker is killed (SIGKILL) and replaced, its sample graded ``timeout``; a worker that dies is
replaced and its sample graded ``error``. The run always continues. Majority-vote equivalence goes
through the same machinery and the same cache; an answer whose grading timed out once (against the gold
answer or in a vote comparison) is never sent to a worker again: in the vote it forms its own class by exact
string, so pathological answers cost one timeout each instead of one per comparison (K^2 per problem).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import wait

from ares_cli.errors import InputError, StageFailure, UsageError
from ares_cli.grading.cache import GradeCache
from ares_cli.grading.extract import extract_boxed
from ares_cli.grading.graders import CORRECT, ERROR, INVALID, TIMEOUT
from ares_cli.grading.registry import GraderRegistry, GraderSpec, load_target, resolve_grader
from ares_cli.grading.start_method import AUTO, worker_context
from ares_cli.grading.worker import worker_main

_MAX_START_FAILURES = 3


@dataclass(frozen=True)
class GradeResult:
    """One graded sample: the extracted answer, the grade and the grader's ``name==version``."""

    extracted: str | None
    grade: str
    grader: str
    detail: str | None = None


@dataclass
class _Worker:
    proc: mp.process.BaseProcess
    conn: object
    started: float
    ready: bool = False
    inflight: deque = field(default_factory=deque)
    deadline: float = 0.0


class GradingPool:
    """Context manager running one grader in ``workers`` processes.

    ``grader``: a registered name (``registry``: default the built-ins) or installed entry point; a
    ``module:function`` path only with ``trust_code`` (the user's opt-in: importing it runs its code).

    ``timeout_s`` is the hard per-sample limit; a soft in-worker alarm fires at ``soft_fraction`` of it so
    ordinary slow samples do not cost a process restart.

    ``mp_context``: how workers start (:mod:`ares_cli.grading.start_method`): ``auto`` (a forkserver that
    has the grader's modules imported, where the platform has one, else ``spawn``), ``forkserver`` or
    ``spawn``.
    """

    grades_in_background = True  # has submit(): grading can overlap the caller's next batch

    def __init__(
        self,
        grader: str | GraderSpec = "math_verify",
        workers: int = 2,
        timeout_s: float = 10.0,
        *,
        registry: GraderRegistry | None = None,
        trust_code: bool = False,
        cache: GradeCache | None = None,
        soft_fraction: float = 0.8,
        start_timeout_s: float = 120.0,
        chunk_size: int = 16,
        mp_context: str = AUTO,
    ):
        if workers < 1:
            raise UsageError(f"grading workers must be >= 1, got {workers}")
        if timeout_s <= 0:
            raise UsageError(f"grading timeout_s must be > 0, got {timeout_s}")
        self.spec = resolve_grader(grader, registry, trust_code=trust_code)
        self._extract = load_target(self.spec.extractor) if self.spec.extractor else None
        self.n_workers, self.timeout_s = workers, float(timeout_s)
        self.soft_s = max(1e-3, self.timeout_s * soft_fraction)
        self.start_timeout_s, self.chunk_size = start_timeout_s, max(1, chunk_size)
        self.cache = cache if cache is not None else GradeCache()
        self.stats = {"graded": 0, "cached": 0, "timeouts": 0, "killed": 0, "died": 0, "started": 0}
        self.timed_out: set[str] = set()  # answers whose grading hit the hard timeout (never retried)
        self._ctx = worker_context(mp_context, self.spec.preload)
        self._workers: list[_Worker] = []
        self._start_failures = 0
        self._lock = threading.RLock()  # one grading call at a time: the caller's or the background one
        self._background: ThreadPoolExecutor | None = None

    # -- lifecycle -------------------------------------------------------------------------------------
    def __enter__(self) -> GradingPool:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def grader(self) -> str:
        return self.spec.label

    @property
    def start_method(self) -> str:
        """How this pool's workers start: ``forkserver`` or ``spawn``."""
        return self._ctx.get_start_method()

    def worker_pids(self) -> list[int]:
        """Process ids of the current workers (for monitoring; they change when a worker is replaced)."""
        return [w.proc.pid for w in self._workers if w.proc.pid is not None]

    def start(self) -> None:
        while len(self._workers) < self.n_workers:
            self._workers.append(self._spawn())

    def close(self, grace_s: float = 1.0) -> None:
        """Stop workers: ask them to exit, wait up to ``grace_s`` in all, then kill what is still running.
        A background grading call still running finishes first; ones not started are cancelled."""
        if self._background is not None:
            self._background.shutdown(wait=True, cancel_futures=True)
            self._background = None
        for w in self._workers:
            try:
                w.conn.send(None)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + grace_s
        alive = [w for w in self._workers if w.proc.is_alive()]
        while alive and time.monotonic() < deadline:
            wait([w.proc.sentinel for w in alive], timeout=max(0.0, deadline - time.monotonic()))
            alive = [w for w in alive if w.proc.is_alive()]
        for w in self._workers:
            self._retire(w, kill=w.proc.is_alive())
        self._workers = []

    def _spawn(self) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        environ = dict(os.environ) if self.start_method == "forkserver" else None  # a fork has the server's
        proc = self._ctx.Process(
            target=worker_main,
            args=(
                child,
                [self.spec.target],
                list(self.spec.preload),
                list(self.spec.warmup),
                self.soft_s,
                environ,
            ),
            daemon=True,
            name=f"ares-grader-{self.spec.name}",
        )
        proc.start()
        child.close()
        self.stats["started"] += 1
        return _Worker(proc, parent, time.monotonic())

    def _retire(self, w: _Worker, *, kill: bool) -> None:
        if kill:
            w.proc.kill()
        w.proc.join(timeout=5.0)
        w.conn.close()

    # -- core loop -------------------------------------------------------------------------------------
    def run(self, tasks: Sequence[tuple[str, str]]) -> list[tuple[str, str | None]]:
        """Grade raw ``(gold, grader_input)`` tasks in the workers (no cache); returns (grade, detail) each."""
        with self._lock:
            return self._run(tasks)

    def _run(self, tasks: Sequence[tuple[str, str]]) -> list[tuple[str, str | None]]:
        if not self._workers:
            self.start()
        results: list[tuple[str, str | None] | None] = [None] * len(tasks)
        pending = deque(range(len(tasks)))
        remaining = len(tasks)
        while remaining:
            now = time.monotonic()
            for w in self._workers:
                if w.ready and not w.inflight and pending:
                    size = min(self.chunk_size, max(1, len(pending) // (2 * self.n_workers)))
                    chunk = [pending.popleft() for _ in range(min(size, len(pending)))]
                    try:
                        w.conn.send([(i, self.spec.target, *tasks[i]) for i in chunk])
                    except OSError:  # it just died: _service replaces it, the chunk goes to another
                        pending.extendleft(reversed(chunk))
                        continue
                    w.inflight.extend(chunk)
                    w.deadline = now + self.timeout_s
            limits = [w.deadline for w in self._workers if w.ready and w.inflight]
            limits += [w.started + self.start_timeout_s for w in self._workers if not w.ready]
            waitables = [w.conn for w in self._workers] + [w.proc.sentinel for w in self._workers]
            wait(waitables, timeout=max(0.0, min(limits) - time.monotonic()) if limits else None)
            for k, w in enumerate(list(self._workers)):
                remaining -= self._service(k, w, results, pending)
        return results  # type: ignore[return-value]

    def _service(self, k: int, w: _Worker, results: list, pending: deque) -> int:
        """Read a worker's messages, then handle its death or overrun; returns how many tasks finished."""
        finished = 0
        try:
            while w.conn.poll():
                msg = w.conn.recv()
                if msg[0] == "ready":
                    w.ready, self._start_failures = True, 0
                elif msg[0] == "fail":
                    raise StageFailure(f"grader {self.spec.label} failed to start in a worker: {msg[1]}")
                else:
                    index, grade, detail = msg
                    if w.inflight and w.inflight[0] == index:
                        w.inflight.popleft()
                        results[index] = (grade, detail)
                        finished += 1
                        w.deadline = time.monotonic() + self.timeout_s
        except (EOFError, OSError):
            pass
        now = time.monotonic()
        dead = not w.proc.is_alive()
        overrun = w.ready and bool(w.inflight) and now >= w.deadline
        if not w.ready and not dead and now >= w.started + self.start_timeout_s:
            self._retire(w, kill=True)
            raise StageFailure(f"grader worker did not start within {self.start_timeout_s:.0f}s")
        if not (dead or overrun):
            return finished
        self._retire(w, kill=not dead)
        if not w.ready:
            self._start_failures += 1
            if self._start_failures >= _MAX_START_FAILURES:
                raise StageFailure(f"grader workers for {self.spec.label} keep dying at start-up")
        if w.inflight:
            head = w.inflight.popleft()
            if dead:
                self.stats["died"] += 1
                results[head] = (ERROR, f"grading worker died (exit code {w.proc.exitcode})")
            else:
                self.stats["killed"] += 1
                results[head] = (TIMEOUT, f"killed after the {self.timeout_s:.3g}s hard timeout")
            finished += 1
            pending.extendleft(reversed(w.inflight))
        self._workers[k] = self._spawn()
        return finished

    # -- public grading API ----------------------------------------------------------------------------
    def gold_for(self, problem: dict) -> str:
        """The gold string graded against: the answer, or with the record's options for choice graders."""
        if self.spec.with_options:
            from ares_cli.grading.choice import choice_gold, parse_options

            try:
                options = parse_options((problem.get("meta") or {}).get("options"))
            except ValueError as exc:
                raise InputError(f"problem {problem.get('id')!r}: {exc}", field="meta.options") from None
            return choice_gold(problem["answer"], options)
        return str(problem["answer"])

    def _grader_input(self, response: str | None, extracted: str | None, given_extracted: bool) -> str | None:
        if self.spec.extract:
            return extracted
        if given_extracted:
            return None if extracted is None else f"\\boxed{{{extracted}}}"
        return response

    def grade(self, items: Sequence[tuple[str, str | None]], *, extracted: bool = False) -> list[GradeResult]:
        """Grade ``(gold, response)`` pairs, or ``(gold, extracted_answer)`` pairs when ``extracted``.

        A missing boxed answer is ``invalid`` for graders that take the extracted answer. Identical
        (grader, gold, answer) keys are verified once: within the batch and across calls via the cache.
        """
        with self._lock:
            return self._grade(items, extracted)

    def submit(self, items: Sequence[tuple[str, str | None]], *, extracted: bool = False) -> Future:
        """:meth:`grade` on the pool's background thread, so that the caller goes on (generating the next
        batch) while the workers grade this one; ``.result()`` is what :meth:`grade` returns (or raises).
        Calls run one at a time in submission order; a :meth:`grade` call waits for the one running."""
        if self._background is None:
            self._background = ThreadPoolExecutor(1, thread_name_prefix="ares-grading")
        return self._background.submit(self.grade, list(items), extracted=extracted)

    def collect(self, futures: Sequence[Future]) -> list[list[GradeResult]]:
        """The results of :meth:`submit` calls, in order (waiting for the ones still running)."""
        return [future.result() for future in futures]

    def _grade(self, items: Sequence[tuple[str, str | None]], extracted: bool) -> list[GradeResult]:
        label = self.spec.label
        prepared: list[tuple[str | None, tuple[str, str, str] | None]] = []
        for gold, text in items:
            if extracted:
                ans = text.strip() or None if text is not None else None
            elif self._extract is not None:
                ans = self._extract(str(gold), text)
            else:
                ans = extract_boxed(text)
            inp = self._grader_input(text, ans, extracted)
            prepared.append((ans, None if inp is None else (label, str(gold), inp)))
        todo: dict[tuple[str, str, str], str | None] = {}
        for _, key in prepared:
            if key is not None and key not in todo:
                todo[key] = self.cache.get(key)
        missing = [key for key, grade in todo.items() if grade is None]
        self.stats["cached"] += len(todo) - len(missing)
        details: dict[tuple[str, str, str], str | None] = {}
        for key, (grade, detail) in zip(missing, self.run([(g, t) for _, g, t in missing]), strict=True):
            todo[key], details[key] = grade, detail
            self.cache.put(key, grade)
        self.stats["graded"] += len(missing)
        self.stats["timeouts"] += sum(todo[key] == TIMEOUT for key in missing)
        self.timed_out.update(ans.strip() for ans, key in prepared if ans and key and todo[key] == TIMEOUT)
        return [
            GradeResult(ans, INVALID, label)
            if key is None
            else GradeResult(ans, todo[key], label, details.get(key))
            for ans, key in prepared
        ]

    def equivalent(self, a: str, b: str) -> bool:
        """Whether answer ``b`` verifies against answer ``a`` taken as gold."""
        return self.grade([(a, b)], extracted=True)[0].grade == CORRECT

    def equivalence_classes(self, answers: Sequence[str | None]) -> list[int]:
        """Class index per answer (first-occurrence order); None/empty answers abstain with -1."""
        return self.equivalence_classes_batch([answers])[0]

    def equivalence_classes_batch(
        self,
        groups: Sequence[Sequence[str | None]],
        *,
        unverifiable: Iterable[str] = (),
        retry_timed_out: bool = False,
    ) -> list[list[int]]:
        """``equivalence_classes`` for many problems at once, comparisons of all problems in parallel.

        Greedy in order: an answer joins the first earlier class whose representative (its first member,
        used as gold) verifies it. Identical strings share a class without verification. An answer in
        ``unverifiable`` (e.g. graded ``timeout`` earlier) or in :attr:`timed_out` is compared with nothing:
        it is its own class, shared only with identical strings. ``retry_timed_out=True`` compares them like
        any other answer (the re-verifying vote; kept as the reference of ``benchmarks/bench_vote.py``).
        """
        skip = set() if retry_timed_out else self.timed_out | {a.strip() for a in unverifiable if a}
        uniq = [list(dict.fromkeys(a.strip() for a in g if a is not None and a.strip())) for g in groups]
        cls: list[list[int]] = [[-1] * len(u) for u in uniq]
        n_classes = [0] * len(groups)
        open_ = [list(range(len(u))) for u in uniq]
        while any(open_):
            pairs, owners = [], []
            for p, idx in enumerate(open_):
                while idx and uniq[p][idx[0]] in skip:  # a hung answer heads its own class
                    cls[p][idx.pop(0)], n_classes[p] = n_classes[p], n_classes[p] + 1
                if not idx:
                    continue
                rep = idx[0]
                cls[p][rep], n_classes[p] = n_classes[p], n_classes[p] + 1
                for j in idx[1:]:
                    if uniq[p][j] in skip:
                        continue
                    pairs.append((uniq[p][rep], uniq[p][j]))
                    owners.append((p, j))
                open_[p] = [j for j in idx[1:] if uniq[p][j] in skip]
            for (p, j), res in zip(owners, self.grade(pairs, extracted=True), strict=True):
                if res.grade == CORRECT:
                    cls[p][j] = n_classes[p] - 1
                else:
                    open_[p].append(j)
            skip |= set() if retry_timed_out else self.timed_out
            for idx in open_:
                idx.sort()
        out = []
        for g, u, c in zip(groups, uniq, cls, strict=True):
            pos = {a: i for i, a in enumerate(u)}
            out.append([c[pos[a.strip()]] if a is not None and a.strip() else -1 for a in g])
        return out
