package namespace

import "context"

// SetBeforeStage makes every version/create call f after its checks and
// before it stages the transaction (nil: nothing).
func (s *Server) SetBeforeStage(f func(ctx context.Context, ds string)) {
	if f == nil {
		s.beforeStage.Store(nil)
		return
	}
	s.beforeStage.Store(&f)
}
