// Package data is goray's streaming datasets: typed rows read lazily from
// memory or files, transformed by operators that run in the driver, as ray
// tasks, or on actor pools whose actors may each hold a whole TPU slice,
// and written to files or read through a Go iterator, with bounded memory
// and backpressure.
//
//	reviews := data.ReadJSONL[Review](data.LocalFiles("reviews/*.jsonl"))
//	tokens := data.Map(reviews, tokenize)
//	preds := data.ApplyPool(tokens, data.Pool[*Model, Config]{
//		Cluster: c, Class: ModelClass, Min: 1, Max: 4,
//		Slice: &ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "2x2"},
//	}, Infer, data.BatchSize(32))
//	err := data.WriteJSONL(ctx, preds, data.LocalFiles("scores.jsonl"))
//
// A [Dataset] is a plan; nothing runs until a sink runs it: [Rows] (a
// range-over-func iterator), [Take], [Count], [WriteJSONL], [WriteCSV],
// and Parquet's writer (below). Each sink call is one run, configured by
// [Option] values.
//
// # Sources
//
// [FromItems] and [Range] read memory. [ReadJSONL], [ReadCSV], [ReadText]
// (lines) and [ReadBinaryFiles] (whole files with their names) read
// files named by [Files]: a file, a folder or a glob, on the local disk
// ([LocalFiles]), in a bucket of package storage ([InBucket]: file:// and
// mem:// built in; gs://, s3:// and azblob:// through the adapter module
// github.com/goray-dev/goray/storage/gocloud) or from a stream
// ([FromStream]). JSON is parsed by encoding/json; CSV by a reader of
// this package that keeps quoted fields byte for byte (see [ReadCSV]).
// Sources cut rows into blocks ([BlockRows]) that the operators process
// in parallel.
//
// # Parquet and other formats
//
// The module github.com/goray-dev/goray/data/parquet reads and writes
// Parquet with github.com/parquet-go/parquet-go:
//
//	preds := parquet.Read[Review](data.LocalFiles("reviews/*.parquet"))
//	err := parquet.Write(ctx, preds, data.LocalFiles("scores.parquet"))
//
// It is a module of its own so that programs that do not use Parquet do
// not build parquet-go and its compression codecs. Any other format plugs
// in the same way, through [ReadFiles] and [WriteFile].
//
// # Operators and where they run
//
// Generic free functions (Go methods cannot have type parameters) add
// operators: [Map], [Filter], [FlatMap] and [MapBatches] ([BatchSize])
// take plain Go functions and run them in the driver's goroutines
// ([Concurrency] at once).
//
// Worker processes cannot receive Go closures: code that runs on the
// cluster must be registered by name at package initialization, like a
// ray.Task. So the remote forms take registered values: [NewMapFunc],
// [NewFilterFunc], [NewFlatMapFunc] and [NewBatchFunc] register a function
// as a ray task that [Apply] runs with [OnTasks] (or, without it, in the
// driver); [NewMapMethod], [NewFilterMethod], [NewFlatMapMethod] and
// [NewBatchMethod] register a method of a ray.ActorClass that [ApplyPool]
// runs on a [Pool] of actors. The trade-off: plain functions cost nothing
// to declare and can capture anything, but stay in the driver; registered
// ones run anywhere, and every row crosses the cluster's codec. Each task
// or actor call handles a whole block or batch, never one row.
//
// A [Pool] starts its Min actors when the run starts, grows by one actor
// (up to Max) when batches have kept waiting for an actor for GrowAfter
// (1s by default), stops an actor beyond Min that has been idle for
// IdleTimeout (30s by default), and stops every actor when the run ends:
// at a steady load it keeps the actors, and the slices, it reserved. With Pool.Slice, each actor holds a whole TPU slice
// reserved atomically by ray.NewSlicePlacementGroup (a model replica per
// v6e 2x2, say); the slice is released when its actor leaves the pool or
// the run ends, on every path, including cancellation.
//
// # All-to-all operations
//
// [Sort], [SortBy], [GroupBy] (with [CountOf], [SumOf], [MinOf], [MaxOf],
// [MeanOf] or any [Agg]), [MapGroups], [Join], [LeftJoin],
// [RandomShuffle] and [Repartition] read their whole input before they
// hand on a row. Each holds at most its [MemoryBudget] of rows (256 MiB
// by default) and spills the rest, sorted, to files in a temporary
// directory or the bucket of [SpillTo], which it merges back and deletes
// by the end of the run, on every path: an external merge sort, whose
// memory does not grow with the data. [Union], [Limit] and [Skip] reshape
// the stream without holding it. [Split] deals a dataset's rows to n
// consumers at once (train workers, say), and [Shard] gives one of those
// shards alone, the same rows, for a consumer that restarts.
//
// # Streaming, memory and order
//
// Operators run as a pipeline: every operator works on its blocks while
// the others work on theirs. Consecutive Map, Filter, FlatMap and
// MapBatches that run in the driver share one set of goroutines (as Ray
// Data fuses map operators) when their options allow it (the same
// Concurrency and order, no BatchSize or MaxBytesInFlight); each keeps
// its own statistics, bad rows and caps. Each operator admits at most
// [MaxRowsInFlight] rows (and, optionally, [MaxBytesInFlight] estimated
// bytes) that it has not yet handed on; when full it stops taking input,
// so a slow consumer slows every producer up to the source, and memory is
// bounded by the caps, not by the data's size. Output is in input order
// unless [Unordered].
//
// # Errors
//
// A row that a source cannot decode or an operator's function fails on is
// a bad row: by default the run fails with a *[RowError] naming the
// operator, the row's source, position (and line) and the cause. With
// [SkipBadRows] they are skipped and listed in [Stats].BadRows, until
// more than the cap fail the run ([ErrTooManyBadRows]). A source that
// breaks while reading fails the run with a *[SourceError]; so does a
// cluster failure (an actor that dies, a closed cluster). Context errors
// are returned as they are. Files written by a sink appear atomically and
// only when the run succeeds.
//
// Every error a sink returns carries a code from goray's closed set
// (ray.CodeOf(err), errors.Is(err, ray.ErrNotFound), ...), its message and
// chain kept: InvalidArgument for bad input (a row a source cannot
// decode, a bad option or argument, a nil context or dataset, a file not
// of its format, a row a format cannot encode); NotFound for a file,
// folder or glob that names nothing; ResourceExhausted for a line or
// record over [MaxLineBytes]; FailedPrecondition for a file that cannot
// be read for its permissions; Unavailable for an I/O error; TaskFailed
// for a row an operator's function failed on and for a panic; context
// errors as they are; the cluster's and storage's errors keep theirs.
//
// # Progress and stats
//
// A live line on stderr shows rows per second and rows in flight per
// operator, through github.com/schollz/progressbar, when stderr is a
// terminal ([Progress] forces it on or off). [CollectStats] stores a
// [Stats] value when the run ends.
//
// # Concurrency
//
// Datasets, Funcs and Methods are immutable and safe for concurrent use;
// several runs of one dataset may go at once, each with its own pools.
// Functions given to operators are called from several goroutines at once
// (up to [Concurrency]) and must be safe for that.
package data
