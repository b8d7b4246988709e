package main

import (
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestProcCPUReadsAnotherProcess checks that procCPU reads another
// process's CPU clock (not the harness's own) and agrees with
// /proc/<pid>/stat within its 10 ms rounding per field.
func TestProcCPUReadsAnotherProcess(t *testing.T) {
	cmd := exec.Command("sh", "-c", `i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done; exec sleep 30`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	// Wait for the loop to end: the CPU time stops growing.
	var last time.Duration = -1
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := statCPU(pid)
		if err != nil {
			t.Fatal(err)
		}
		if c == last && c >= 100*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the busy loop did not finish in 30 s (CPU %v)", c)
		}
		last = c
		time.Sleep(200 * time.Millisecond)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(processCPUClock(pid), &ts); err != nil {
		t.Fatalf("the CPU clock of pid %d: %v", pid, err)
	}
	got, err := procCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	if d := got - last; d < -25*time.Millisecond || d > 25*time.Millisecond {
		t.Errorf("procCPU = %v, /proc/%d/stat says %v; want them within 25 ms", got, pid, last)
	}
	if got%(10*time.Millisecond) == 0 {
		t.Errorf("procCPU = %v, a multiple of 10 ms: read from /proc/<pid>/stat, not the clock", got)
	}
	if _, err := procCPU(1 << 22); err == nil {
		t.Error("procCPU of a pid that does not exist: no error")
	}
}
