"""A data-parallel training program for goray's train.NewProgram.

It fits y = w.x + b (the known answer: w = [2, -3, 0.5, 1.25], b = 0.75) by
gradient descent: every process (one per TPU host) computes the gradient of
its shard of the data, the processes average their gradients, and rank 0
commits a checkpoint directory every EVERY steps through goray_train. It
reports the loss of every step, and resumes from the checkpoint the driver
hands it after a host was lost.

With JAX installed (a TPU image), the step is jax.grad of the loss, and the
gradients are averaged across hosts by JAX (multihost_utils), after
jax.distributed.initialize. Without JAX (CI's python3 on goray's
simulator), the same step runs in pure Python, and the gradients are summed
over a TCP connection to rank 0 at JAX_COORDINATOR_ADDRESS, the port goray
reserved for JAX's coordinator.

Checkpoints go where the run's storage is: a directory every host shares
(file://; on the simulator, or a shared volume) or a bucket (gs://, on
GKE), which this program reads and writes through fsspec (gcsfs in the
image).

    python3 train.py STEPS EVERY
"""

import json
import os
import random
import socket
import sys
import time

import goray_train  # put on PYTHONPATH by goray for every program it starts

try:
    import jax
    import jax.numpy as jnp
    from jax.experimental import multihost_utils
except ImportError:
    jax = None

TRUE_W, TRUE_B = [2.0, -3.0, 0.5, 1.25], 0.75
SAMPLES, LR = 512, 0.5


def open_file(path, mode="r"):
    """Opens a file of the run's storage: a local path (file:// storage, a
    directory every host shares), or a URL such as gs://bucket/... (the
    storage of a run on GKE), through fsspec (pip install gcsfs for gs://)."""
    if "://" in path:
        import fsspec

        return fsspec.open(path, mode)
    return open(path, mode)


def save_params(d, params):
    """Writes params into checkpoint directory d (a path or a URL prefix)."""
    with open_file(d.rstrip("/") + "/params.json", "w") as f:
        json.dump(params, f)


def load_params(d):
    """Reads the params of checkpoint directory d (a path or a URL)."""
    with open_file(d.rstrip("/") + "/params.json") as f:
        return json.load(f)


def dataset():
    """The whole data set, the same on every host."""
    rng = random.Random(7)
    xs = [[rng.uniform(-1, 1) for _ in TRUE_W] for _ in range(SAMPLES)]
    ys = [sum(w * v for w, v in zip(TRUE_W, x)) + TRUE_B for x in xs]
    return xs, ys


def local_grad(params, xs, ys):
    """The gradient of the mean squared error over all SAMPLES contributed by
    this shard, and its share of the loss; params are w then b."""
    g = [0.0] * (len(params) + 1)  # the last element carries the loss
    for x, y in zip(xs, ys):
        e = sum(w * v for w, v in zip(params, x)) + params[-1] - y
        for j, v in enumerate(x):
            g[j] += 2 * e * v / SAMPLES
        g[len(x)] += 2 * e / SAMPLES
        g[-1] += e * e / SAMPLES
    return g


class Summer:
    """Sums a list of floats over all ranks, through rank 0 (pure Python)."""

    def __init__(self, rank, n, coordinator):
        self.rank, self.n, self.peers = rank, n, []
        host, port = coordinator.rsplit(":", 1)
        if n == 1:
            return
        if rank == 0:
            ln = socket.create_server(("", int(port)), backlog=n)
            ln.settimeout(120)
            peers = {}
            while len(peers) < n - 1:
                c, _ = ln.accept()
                c.settimeout(300)
                f = c.makefile("rw")
                peers[int(f.readline())] = f  # each rank says who it is
            ln.close()
            self.peers = [peers[r] for r in sorted(peers)]  # a fixed order: the same sums every run
        else:
            deadline = time.monotonic() + 120
            while True:  # rank 0 may not listen yet
                try:
                    c = socket.create_connection((host, int(port)), timeout=10)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            c.settimeout(300)
            f = c.makefile("rw")
            f.write("%d\n" % rank)
            f.flush()
            self.peers.append(f)

    def sum(self, v):
        if self.n == 1:
            return v
        if self.rank == 0:
            total = list(v)
            for p in self.peers:
                line = p.readline()
                if not line:
                    raise ConnectionError("a rank went away")
                for i, x in enumerate(json.loads(line)):
                    total[i] += x
            for p in self.peers:
                p.write(json.dumps(total) + "\n")
                p.flush()
            return total
        p = self.peers[0]
        p.write(json.dumps(v) + "\n")
        p.flush()
        line = p.readline()
        if not line:
            raise ConnectionError("rank 0 went away")
        return json.loads(line)


def main():
    steps, every = int(sys.argv[1]), int(sys.argv[2])
    world = goray_train.world()
    rank, n = world["rank"], world["world_size"]
    xs, ys = dataset()
    xs, ys = xs[rank::n], ys[rank::n]  # this rank's shard

    params, step = [0.0] * (len(TRUE_W) + 1), 0
    ck = goray_train.get_checkpoint()  # rank 0's directory: only rank 0 commits one
    if ck is not None:
        params = load_params(ck.path)
        step = ck.iteration
    mode = "jax" if jax is not None else "pure python"
    print("rank %d of %d (%s) starts at step %d, attempt %d" % (rank, n, mode, step, world["attempt"]), flush=True)

    if jax is not None:
        # JAX reads JAX_COORDINATOR_ADDRESS; on a TPU host it counts and
        # numbers the processes from the TPU env, elsewhere pass them.
        jax.distributed.initialize(coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
                                   num_processes=n, process_id=rank)
        X, Y = jnp.asarray(xs), jnp.asarray(ys)

        def shard_loss(p):
            e = X @ p[:-1] + p[-1] - Y
            return jnp.sum(e * e) / SAMPLES

        step_fn = jax.jit(jax.value_and_grad(shard_loss))

        def grad_and_loss(p):
            loss, g = step_fn(jnp.asarray(p))
            both = jnp.concatenate([g, jnp.array([loss])])
            total = multihost_utils.process_allgather(both).sum(axis=0)  # the all-reduce across hosts
            return [float(v) for v in total]
    else:
        summer = Summer(rank, n, os.environ["JAX_COORDINATOR_ADDRESS"])

        def grad_and_loss(p):
            return summer.sum(local_grad(p, xs, ys))

    while step < steps:
        step += 1
        g = grad_and_loss(params)
        loss = g[-1]  # of the parameters before this step
        params = [w - LR * gw for w, gw in zip(params, g[:-1])]
        metrics = {"loss": loss}
        if rank == 0 and step % every == 0:
            d = goray_train.staging_dir()
            save_params(d, params)
            goray_train.report(metrics, checkpoint_dir=d)
        else:
            goray_train.report(metrics)
    if rank == 0:
        print("final w=%s b=%.4f loss=%.3g" % (["%.4f" % w for w in params[:-1]], params[-1], loss), flush=True)


if __name__ == "__main__":
    main()
