package ray

import "github.com/goray-dev/goray/backend"

// The types below are package backend's, re-exported so that a program
// imports ray and one backend package (backend/local, backend/fake), never
// package backend itself, which is for backend authors.

// State is a cluster's state as [Cluster.Snapshot] reports it.
type State = backend.State

// NodeState is one node of a [State].
type NodeState = backend.NodeState

// PlacementGroupState is one placement group of a [State].
type PlacementGroupState = backend.PlacementGroupState

// ActorState is one actor of a [State].
type ActorState = backend.ActorState

// SliceState is one TPU slice as [TPUSlices] reports it.
type SliceState = backend.SliceState

// PendingSliceRequest is a slice reservation waiting for slices, as
// [PendingSliceRequests] reports it.
type PendingSliceRequest = backend.PendingSliceRequest

// FaultInjector is implemented by backends that can simulate failures
// (KillNode, RestartNode); find it with a type assertion on
// [Cluster.Backend].
type FaultInjector = backend.FaultInjector

// SliceReserver is implemented by backends that reserve TPU slices; the
// slice API of this package ([NewSlicePlacementGroup], whole slices and
// sub-slices) uses it.
type SliceReserver = backend.SliceReserver

// ReservedSlice is one slice of a [SlicePlacementGroup] (or a
// [SliceReservation]): its name, hosts and hostnames, and its sub-slice
// when the reservation is of one.
type ReservedSlice = backend.ReservedSlice

// SliceRequest is a request to a [SliceReserver].
type SliceRequest = backend.SliceRequest

// SliceReservation is what a [SliceReserver] grants.
type SliceReservation = backend.SliceReservation

// ObjectID identifies an object: the value behind an [ObjectRef].
type ObjectID = backend.ObjectID

// ActorID identifies an actor.
type ActorID = backend.ActorID

// PlacementGroupID identifies a placement group.
type PlacementGroupID = backend.PlacementGroupID

// Backend is the driver interface a backend package implements; a program
// gets one from a backend package (local.New, fake.New) and passes it to
// [NewCluster].
type Backend = backend.Backend
