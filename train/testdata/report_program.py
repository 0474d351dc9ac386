"""A training program that reports through goray_train: every step adds
rank+1 to this rank's state; every EVERY steps each rank commits its
state in a checkpoint directory of its own. Resumed, it reads its state
from the checkpoint, so the final state of rank r is STEPS*(r+1)."""

import json
import os
import sys

import goray_train

steps, every = int(sys.argv[1]), int(sys.argv[2])
world = goray_train.world()
rank = world["rank"]
assert world["world_size"] == int(os.environ["GORAY_TRAIN_WORLD_SIZE"]), world
ck = goray_train.get_checkpoint()
step, state, resumed = 0, 0.0, 0
if ck is not None:
    step = resumed = ck.iteration
    with open(os.path.join(ck.path, "state.json")) as f:
        saved = json.load(f)
    assert saved["rank"] == rank, (saved, rank)
    state = saved["state"]
print("rank %d starts at step %d of attempt %d" % (rank, step, world["attempt"]), flush=True)
while step < steps:
    step += 1
    state += rank + 1
    metrics = {"state": state, "resumed_from": resumed, "attempt": world["attempt"]}
    if step % every == 0:
        d = goray_train.staging_dir()
        with open(os.path.join(d, "state.json"), "w") as f:
            json.dump({"rank": rank, "state": state}, f)
        it = goray_train.report(metrics, checkpoint_dir=d)
    else:
        it = goray_train.report(metrics)
    assert it == step, (it, step)
