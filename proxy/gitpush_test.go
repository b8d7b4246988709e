package proxy

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/preview"
)

func pktLine(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

// TestReadPktCommandsLeavesThePack checks that holding a push reads its
// commands and nothing of the pack after them.
func TestReadPktCommandsLeavesThePack(t *testing.T) {
	id := strings.Repeat("a", 40)
	cmds := pktLine(strings.Repeat("0", 40)+" "+id+" refs/heads/x\x00report-status side-band-64k\n") + "0000"
	r := strings.NewReader(cmds + "PACK\x00\x00\x00\x02rest-of-the-pack")
	got, err := readPktCommands(r, preview.MaxGitCommands)
	if err != nil || string(got) != cmds {
		t.Fatalf("readPktCommands = %q, %v; want %q", got, err, cmds)
	}
	if rest, _ := io.ReadAll(r); !bytes.HasPrefix(rest, []byte("PACK")) {
		t.Fatalf("after the commands the reader is at %q, want the untouched pack", rest)
	}
	// A bound stops the read before the flush.
	r = strings.NewReader(cmds + "PACK")
	if got, _ := readPktCommands(r, 20); len(got) > 20 {
		t.Fatalf("readPktCommands with limit 20 read %d bytes", len(got))
	}
}

func TestGitRefusal(t *testing.T) {
	gp := &preview.GitPush{Updates: []preview.RefChange{{Ref: "refs/heads/x"}}}
	plain := string(gitRefusal(gp, []string{"report-status"}, "denied\nby a person"))
	if want := pktLine("unpack ok\n") + pktLine("ng refs/heads/x denied by a person\n") + "0000"; plain != want {
		t.Fatalf("gitRefusal = %q, want %q", plain, want)
	}
	band := string(gitRefusal(gp, []string{"side-band-64k"}, "no"))
	if !strings.HasPrefix(band, pktLine("\x02aileron-proxy: no\n")) || !strings.Contains(band, "\x01000eunpack ok\n") || !strings.HasSuffix(band, "0000") {
		t.Fatalf("side-band refusal = %q", band)
	}
}
