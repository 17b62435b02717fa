package retry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"cellguard/internal/retry"
)

func TestDelayDoublesUpToMax(t *testing.T) {
	b := retry.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	want := []time.Duration{10, 20, 40, 50, 50}
	for i, w := range want {
		if got := b.Delay(i); got != w*time.Millisecond {
			t.Errorf("Delay(%d) = %v; want %v", i, got, w*time.Millisecond)
		}
	}
	if got := b.Delay(1000); got != b.Max {
		t.Errorf("Delay(1000) = %v; want %v", got, b.Max)
	}
}

func TestDelayJitterStaysInRange(t *testing.T) {
	b := retry.Backoff{Initial: time.Millisecond, Max: 8 * time.Millisecond, Jitter: true}
	for i := range 200 {
		if d := b.Delay(i % 6); d < 0 || d > 8*time.Millisecond {
			t.Fatalf("Delay(%d) = %v; want within [0, 8ms]", i%6, d)
		}
	}
}

func TestDoStopsOnSuccessAndFinalErrors(t *testing.T) {
	final := errors.New("final")
	var calls int
	err := retry.Do(t.Context(), 10, retry.Backoff{}, func(context.Context) error {
		calls++
		if calls == 3 {
			return final
		}
		return errors.New("transient")
	}, retry.Unless(final))
	if !errors.Is(err, final) || calls != 3 {
		t.Errorf("Do = %v after %d calls; want final after 3", err, calls)
	}
	calls = 0
	err = retry.Do(t.Context(), 4, retry.Backoff{}, func(context.Context) error { calls++; return errors.New("x") }, nil)
	if err == nil || calls != 4 {
		t.Errorf("Do = %v after %d calls; want an error after 4", err, calls)
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := retry.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep(cancelled, 1h) = %v; want context.Canceled", err)
	}
	err := retry.Do(ctx, 3, retry.Backoff{Initial: time.Hour, Max: time.Hour}, func(context.Context) error { return errors.New("x") }, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Do(cancelled) = %v; want it to wrap context.Canceled", err)
	}
}
