package serve

// BodyMemory returns, for tests, the high-water marks since its last call
// of s's budget for request bodies in use (Options.MaxBufferedBodyBytes)
// and of the bytes of Process bodies' retry buffers in memory, and starts
// new ones from the current values.
func BodyMemory(s *Server) (budget, retryBuffers int64) {
	budget, retryBuffers = s.bodiesHeld.peak.Load(), s.retryBuffered.peak.Load()
	s.bodiesHeld.peak.Store(s.bodiesHeld.cur.Load())
	s.retryBuffered.peak.Store(s.retryBuffered.cur.Load())
	return budget, retryBuffers
}
