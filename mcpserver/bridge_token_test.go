package mcpserver

import "testing"

func TestProgressToken(t *testing.T) {
	for _, c := range []struct {
		in   any
		want any
		ok   bool
	}{
		{"p1", "p1", true}, {float64(5), int64(5), true}, {int64(7), int64(7), true},
		{1.5, nil, false}, {float64(1 << 60), nil, false}, {true, nil, false}, {nil, nil, false},
	} {
		got, ok := progressToken(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("progressToken(%v) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}
