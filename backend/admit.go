package backend

// The checks in this file are the admission rules every backend applies, in
// one place so that backends agree on what they refuse and on the words of
// the refusal. Each takes the operation name of the caller, a plain verb
// phrase such as "submit task examples.square".

// Check validates a task submission against the registered code: a
// non-nil spec whose task name is registered with exec. It does not look at
// the scheduling options; backends check those against their nodes.
func (s *TaskSpec) Check(op string, exec Executor) error {
	switch {
	case s == nil:
		return Errorf(InvalidArgument, op, "nil task spec")
	case s.Name == "":
		return Errorf(InvalidArgument, op, "empty task name")
	case !exec.HasTask(s.Name):
		return Errorf(NotFound, op, "task %q is not registered", s.Name)
	}
	return nil
}

// Check validates an actor creation: a non-nil spec of a registered class,
// a name no live actor has (live reports the live actor of a name), and a
// constructor argument given as a value, not a ref.
func (s *ActorSpec) Check(op string, exec Executor, live func(name string) (ActorID, bool)) error {
	switch {
	case s == nil:
		return Errorf(InvalidArgument, op, "nil actor spec")
	case s.Class == "":
		return Errorf(InvalidArgument, op, "empty actor class name")
	case !exec.HasActorMethod(s.Class, ""):
		return Errorf(NotFound, op, "actor class %q is not registered", s.Class)
	}
	if s.Name != "" {
		if other, ok := live(s.Name); ok {
			return Errorf(AlreadyExists, op, "an actor named %q already exists (%s)", s.Name, other)
		}
	}
	if s.Arg.Ref != 0 {
		return Errorf(InvalidArgument, op, "actor constructors take a value, not a ref")
	}
	return nil
}
