"""goray_train: report to a goray train run from a program it started.

A program that train.NewProgram starts (one process per host, or per TPU
process) uses this module to report metrics for each step, commit
checkpoint directories, and read the checkpoint to resume from and the
attempt's world, the way a Ray Train loop uses ray.train.report and
ray.train.get_checkpoint:

    import goray_train

    world = goray_train.world()              # rank, world_size, slices, ...
    ck = goray_train.get_checkpoint()        # None on a fresh start
    step = ck.iteration if ck else 0
    state = load(ck.path) if ck else init()
    while step < steps:
        step += 1
        loss = train_step(state)
        if step % 10 == 0:
            d = goray_train.staging_dir()    # a fresh directory under the run's storage
            save(state, d)
            goray_train.report({"loss": loss}, checkpoint_dir=d)
        else:
            goray_train.report({"loss": loss})

The N-th report of every rank is iteration N (counting on from the resumed
checkpoint); a checkpoint is complete once every rank has reported that
iteration, and only then will a later attempt resume from it. Every rank
may commit a directory of its own; ranks that commit none resume from
rank 0's.

It needs only the standard library. The driver serves the protocol
(HTTP and JSON, described in goray's docs/train.md) and puts its address
and a per-attempt token in the environment: GORAY_TRAIN_ENDPOINT,
GORAY_TRAIN_TOKEN, GORAY_TRAIN_RUN, GORAY_TRAIN_RANK. The worker puts this
module on PYTHONPATH for every program it starts.
"""

import json
import os
import urllib.error
import urllib.parse
import urllib.request
import uuid

__all__ = ["Checkpoint", "ReportError", "world", "get_checkpoint", "report", "staging_dir"]

_TIMEOUT = 600  # seconds; a report waits for the checkpoint's commit


class ReportError(Exception):
    """The driver refused a request: status is the HTTP status, message says why."""

    def __init__(self, status, message):
        super().__init__("goray_train: %s (HTTP %d)" % (message, status))
        self.status = status
        self.message = message


class Checkpoint:
    """The checkpoint a rank resumes from.

    path is the directory this rank committed (else rank 0's): a local path
    for file:// storage, a URL such as gs://... otherwise; None when the
    checkpoint holds no directory (a Go loop's data). iteration is the
    report it was taken at, metrics rank 0's metrics of that report.
    """

    def __init__(self, iteration, metrics, path, ranks):
        self.iteration = iteration
        self.metrics = metrics
        self.path = path or None
        self.ranks = ranks

    def __repr__(self):
        return "Checkpoint(iteration=%d, path=%r)" % (self.iteration, self.path)


def _env(name):
    v = os.environ.get(name)
    if not v:
        raise RuntimeError(
            "goray_train: %s is not set: run this program with goray's train.NewProgram" % name)
    return v


def _request(method, path, body=None, query=None):
    url = _env("GORAY_TRAIN_ENDPOINT").rstrip("/") + path
    if query:
        url += "?" + urllib.parse.urlencode(query)
    data = None if body is None else json.dumps(body, allow_nan=False).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Authorization", "Bearer " + _env("GORAY_TRAIN_TOKEN"))
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=_TIMEOUT) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as e:
        try:
            msg = json.loads(e.read()).get("error", e.reason)
        except ValueError:
            msg = e.reason
        raise ReportError(e.code, msg) from None


_world = None


def world():
    """The attempt's world, fetched once: run, attempt, rank, world_size,
    slice_index, num_slices, slices (names), storage (the run's directory
    or URL; empty when programs cannot write it), iteration (of the
    checkpoint resumed from, 0 for a fresh start) and checkpoint."""
    global _world
    if _world is None:
        _world = _request("GET", "/v1/world",
                          query={"run": _env("GORAY_TRAIN_RUN"), "rank": _env("GORAY_TRAIN_RANK")})
    return _world


def get_checkpoint():
    """The checkpoint to resume from, or None for a fresh start."""
    ck = world().get("checkpoint")
    if not ck:
        return None
    return Checkpoint(ck["iteration"], ck.get("metrics") or {}, ck.get("dir"), ck.get("ranks") or [])


def report(metrics, checkpoint_dir=None):
    """Reports this rank's metrics for its next step and, with
    checkpoint_dir, commits that directory (written under the run's
    storage, see staging_dir) as this rank's part of the step's checkpoint.
    The directory is moved into the checkpoint: do not write to it
    afterwards. Returns the step's iteration number."""
    body = {"run": _env("GORAY_TRAIN_RUN"), "rank": int(_env("GORAY_TRAIN_RANK")),
            "metrics": {k: float(v) for k, v in (metrics or {}).items()}}
    if checkpoint_dir is not None:
        body["checkpoint_dir"] = os.fspath(checkpoint_dir)
    return _request("POST", "/v1/report", body=body)["iteration"]


def staging_dir():
    """A fresh directory under the run's storage to write a checkpoint in
    (created here for a local path; for a URL, write its objects under it).
    The driver clears what was never committed at the next attempt."""
    storage = world().get("storage")
    if not storage:
        raise RuntimeError(
            "goray_train: the run's storage is in the driver's memory; set RunConfig.Storage "
            "to file:// (a directory every host shares) or gs:// to commit checkpoint directories")
    name = "rank_%05d-%s" % (int(_env("GORAY_TRAIN_RANK")), uuid.uuid4().hex[:12])
    if "://" in storage:
        return storage.rstrip("/") + "/staging/" + name
    d = os.path.join(storage, "staging", name)
    os.makedirs(d)
    return d
