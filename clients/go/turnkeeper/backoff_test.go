package turnkeeper

import (
	"testing"
	"time"
)

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}
	for failures, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 50: time.Second} {
		if got := b.delay(failures); got != want {
			t.Errorf("delay(%d) = %v, want %v", failures, got, want)
		}
	}
	b.Jitter = 0.2
	for range 100 {
		if d := b.delay(2); d < 160*time.Millisecond || d > 240*time.Millisecond {
			t.Fatalf("jittered delay %v outside 200ms ± 20%%", d)
		}
	}
}
