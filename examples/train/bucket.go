package main

import (
	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
)

// memBucket is an in-memory checkpoint bucket that outlives the Fit call,
// so that the final checkpoint can be read afterwards. A real run would use
// RunConfig.Storage "gs://bucket/prefix".
func memBucket() *blob.Bucket { return memblob.OpenBucket(nil) }
