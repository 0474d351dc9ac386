// Package train runs distributed training on whole TPU slices, the Go form
// of Ray Train's JaxTrainer: give it a TPU generation, a topology and a
// number of slices, and it runs a training loop (or an external program)
// on every host, with collectives among the workers, checkpoints in an
// object store, and restarts on fresh slices after a failure. It never exposes
// placement.
//
// # Scaling
//
// A [ScalingConfig] names the slices ("v6e", "4x4", 2 slices). The number
// of workers is derived, one per host of every slice (8 for two v6e 4x4
// slices); a NumWorkers given by the user is only checked against it, with
// an error that says what the topology implies. Each attempt reserves its
// slices atomically with ray.NewSlicePlacementGroup and pins worker i to
// host i, whose env (TPU_WORKER_ID, TPU_WORKER_HOSTNAMES, TPU_NAME,
// MEGASCALE_* for multislice) comes from that live reservation, never from
// a previous attempt's.
//
// An elastic run (ScalingConfig.MinSlices below NumSlices, Ray Train's
// num_workers=(min, max)) takes as many slices as it can get within
// ElasticWait at each attempt, down to MinSlices, and grows back at its
// next restart or, with GrowAtCheckpoint, at a checkpoint.
//
// # Workers and collectives
//
// A Go training loop is registered at package level with [NewLoop] (so
// that worker processes have it too) and runs on every worker with a
// [Worker]: rank, world size, slice index, the host's env, the checkpoint
// to resume from, [Worker.Report], and the collectives [AllReduce] (Sum,
// Mean, Max, Min), [Broadcast], [AllGather] and [Worker.Barrier] on
// numeric slices.
//
// Collectives do not go through the cluster: a worker process, or a pod,
// has no cluster handle. Instead the driver runs a rendezvous, a TCP
// listener whose address each worker gets in its task input. Every worker
// connects to it, announces the address of its own peer listener, and,
// once every rank has joined, gets every rank's address; it then connects
// to the next rank, forming a ring of TCP connections. AllReduce is a ring
// reduce-scatter followed by a ring all-gather: each worker sends and
// receives 2(n-1)/n times the data, whatever n. Broadcast pipelines 1 MiB
// chunks around the ring; AllGather passes each rank's block n-1 hops. The
// same transport serves goroutines, worker processes and pods.
//
// When a worker fails (its loop returns an error or panics, its host dies,
// its process exits, its connection breaks), the driver learns it from the
// worker's goodbye, its broken connection or its task's error, and sends
// every other worker an abort naming the failed rank: their pending and
// later collectives return a [*WorkerFailedError] with that rank at once,
// and their loop's context is cancelled. A worker whose ring neighbour
// vanished asks the driver which rank failed; it never waits for data that
// cannot come.
//
// # Checkpoints
//
// [Worker.Report] sends metrics and optional checkpoint data to the driver,
// which writes them to a bucket of package storage (RunConfig.Storage:
// file:// and mem:// built in; gs://, s3:// and azblob:// after importing
// github.com/goray-dev/goray/storage/gocloud and the gocloud.dev driver).
// The N-th reports of all ranks form iteration N; its checkpoint becomes
// complete when a COMPLETE marker is written after every rank's data, so a
// crash mid-write never leaves a checkpoint that resume would pick. The
// newest RunConfig.KeepCheckpoints complete checkpoints are kept. Since
// the driver reads and writes every checkpoint, workers need no storage
// access, and mem:// works with worker processes too.
//
// # Fault tolerance
//
// After a failure, Fit releases the slices (cancelling every worker),
// reserves fresh ones (waiting up to ScalingConfig.ReserveTimeout), and
// restarts every worker from the latest complete checkpoint, up to
// RunConfig.MaxFailures times. The [Result] holds the final metrics, the
// checkpoints and the failure history with causes (a lost host is
// ray.Unavailable). A run that ended without error records so in its
// storage; started again with the same loop and configuration, Fit
// returns that final result at once, with [Result.AlreadyFinished] set.
//
// # Datasets
//
// RunConfig.Datasets attaches datasets of package data to a run (Ray
// Train's datasets=), made with [Data] or, for a plan per epoch,
// [EpochData]; each worker ranges over its own shard of each with
// [DatasetShard] (get_dataset_shard), one epoch per range. A dataset is a
// plan of Go closures that cannot reach a worker process or a pod, so it
// runs in the driver, once per epoch, split into one shard per rank
// (data.Split: rank i gets rows i, i+n, ...; equal shares unless
// [KeepRemainder]), and each worker reads its shard over a connection to
// the rendezvous, rows encoded with encoding/gob, at most two frames
// ahead of what it has consumed: a slow worker holds its rows in the
// driver's bounded queues and, once they are full, the others, instead of
// making the driver buffer. Every report records each rank's position
// (epoch, rows consumed) in each dataset in the checkpoint, and a resumed
// run starts each rank's shard there: within an epoch no row is seen
// twice or lost, for an ordered run of a deterministic dataset.
//
// # External programs
//
// [NewProgram] runs a [Program], such as python3 train.py with JAX, for
// every worker with its TPU env plus JAX_COORDINATOR_ADDRESS (which
// jax.distributed.initialize reads), and JAX_NUM_PROCESSES and
// JAX_PROCESS_ID (which it does not: on a TPU host it counts and numbers
// the processes from the TPU env; pass them as arguments elsewhere); its
// output reaches the driver line by line with a rank prefix. A program
// reports metrics per step, commits checkpoint directories and asks for
// the checkpoint to resume from over HTTP and JSON at GORAY_TRAIN_ENDPOINT
// (in Python, import goray_train: report and get_checkpoint, as Ray
// Train's), with the same effects as [Worker.Report]. The run fails
// as soon as one process exits non-zero, and every process is stopped on
// cancel or failure.
//
// # Progress
//
// By default a run draws a live line with the latest metrics on stderr
// when it is a terminal (github.com/schollz/progressbar), and logs
// throttled slog lines otherwise; [ProgressOff] turns it off.
//
// # Concurrency
//
// A [Trainer] is safe for concurrent use; each Fit is a run of its own.
// A [Worker] is valid during its loop call; its collectives run one at a
// time, in the same order on every rank.
package train
