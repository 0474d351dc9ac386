"""A stand-in for a JAX training script: checks the TPU env of its host,
meets the other hosts at JAX_COORDINATOR_ADDRESS (as
jax.distributed.initialize would), and can fail or hang on request."""
import os, socket, sys, time

env = os.environ
rank = int(env["JAX_PROCESS_ID"])
world = int(env["JAX_NUM_PROCESSES"])
slice_index = int(env["GORAY_TRAIN_SLICE_INDEX"])
hosts = env["TPU_WORKER_HOSTNAMES"].split(",")
mode = sys.argv[1]

problems = []
if int(env["GORAY_TRAIN_RANK"]) != rank:
    problems.append("GORAY_TRAIN_RANK")
if int(env["TPU_WORKER_ID"]) != rank % len(hosts):
    problems.append("TPU_WORKER_ID=%s" % env["TPU_WORKER_ID"])
if env.get("TPU_TOPOLOGY") != "4x4" or env.get("TPU_ACCELERATOR_TYPE") != "v6e-16":
    problems.append("topology %s %s" % (env.get("TPU_TOPOLOGY"), env.get("TPU_ACCELERATOR_TYPE")))
if world > len(hosts):
    if env.get("MEGASCALE_SLICE_ID") != str(slice_index) or env.get("MEGASCALE_NUM_SLICES") != str(world // len(hosts)):
        problems.append("MEGASCALE %s/%s" % (env.get("MEGASCALE_SLICE_ID"), env.get("MEGASCALE_NUM_SLICES")))
if env.get("EXTRA") != "yes":
    problems.append("EXTRA")
if env.get("CHECK_DNS") == "1":
    # Every host name of the TPU env resolves (cluster DNS on Kubernetes),
    # and this host's own name to this pod's IP.
    def resolve(name):
        # A pod's name is in cluster DNS a moment after its IP is known:
        # retry for a while, as JAX's initialization does.
        for attempt in range(300):
            try:
                return socket.gethostbyname(name)
            except OSError:
                if attempt == 299:
                    raise
                time.sleep(0.1)
    for i, h in enumerate(hosts):
        try:
            ip = resolve(h)
        except OSError as e:
            problems.append("resolve %s: %s" % (h, e))
            continue
        if i == int(env["TPU_WORKER_ID"]) and ip != env.get("POD_IP"):
            problems.append("own name %s is %s, not POD_IP %s" % (h, ip, env.get("POD_IP")))
    mc = env.get("MEGASCALE_COORDINATOR_ADDRESS", "")
    if mc:
        try:
            resolve(mc.rsplit(":", 1)[0] if mc.count(":") == 1 else mc)
        except OSError as e:
            problems.append("resolve MEGASCALE_COORDINATOR_ADDRESS %s: %s" % (mc, e))
    if not problems:
        print("rank %d resolved %d host names" % (rank, len(hosts)), flush=True)
print("rank %d worker %s of %s: %s" % (rank, env["TPU_WORKER_ID"], env["TPU_NAME"], "env ok" if not problems else "BAD " + " ".join(problems)), flush=True)

host, port = env["JAX_COORDINATOR_ADDRESS"].rsplit(":", 1)
if mode == "meet":
    if rank == 0:
        srv = socket.create_server((host, int(port)))
        got = []
        for _ in range(world - 1):
            c, _ = srv.accept()
            got.append(int(c.recv(16).decode()))
            c.close()
        print("coordinator met ranks %s" % sorted(got), flush=True)
    else:
        for _ in range(200):
            try:
                c = socket.create_connection((host, int(port)))
                c.sendall(str(rank).encode())
                c.close()
                break
            except OSError:
                time.sleep(0.05)
        print("met the coordinator", file=sys.stderr, flush=True)
elif mode == "fail":
    if rank == 1:
        print("rank 1 gives up", flush=True)
        sys.exit(3)
    # Written to a temporary name and renamed, so that the test never reads
    # the file of a program stopped between creating it and writing it.
    tmp = os.path.join(sys.argv[2], ".tmp-%d" % rank)
    with open(tmp, "w") as f:
        f.write(str(os.getpid()))
    os.rename(tmp, os.path.join(sys.argv[2], "pid-%d" % rank))
    time.sleep(300)
