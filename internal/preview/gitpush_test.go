package preview

import (
	"fmt"
	"strings"
	"testing"
)

func pkt(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

const (
	idA = "1111111111111111111111111111111111111111"
	idB = "2222222222222222222222222222222222222222"
	idZ = "0000000000000000000000000000000000000000"
)

func TestParseGitPush(t *testing.T) {
	caps := "\x00 report-status side-band-64k agent=git/2.47"
	tests := []struct {
		name      string
		data      string
		want      []string
		caps      int
		truncated bool
		cert      bool
		err       string
	}{
		{name: "one update", data: pkt(idA+" "+idB+" refs/heads/main"+caps+"\n") + "0000PACK...",
			want: []string{"refs/heads/main 111111111111..222222222222"}, caps: 3},
		{name: "create and delete", data: pkt(idZ+" "+idB+" refs/heads/topic"+caps+"\n") + pkt(idA+" "+idZ+" refs/heads/old\n") + "0000",
			want: []string{"refs/heads/topic 222222222222 (create)", "refs/heads/old 111111111111 (delete)"}, caps: 3},
		{name: "shallow first", data: pkt("shallow "+idA+caps) + pkt(idA+" "+idB+" refs/heads/main\n") + "0000",
			want: []string{"refs/heads/main 111111111111..222222222222"}, caps: 3},
		{name: "signed push", data: pkt("push-cert"+caps+"\n") + pkt("certificate version 0.1\n") + pkt("pusher a <a@b> 1 +0000\n") + pkt("\n") +
			pkt(idA+" "+idB+" refs/heads/main\n") + pkt("-----BEGIN PGP SIGNATURE-----\n") + pkt("push-cert-end\n") + "0000",
			want: []string{"refs/heads/main 111111111111..222222222222"}, caps: 3, cert: true},
		{name: "no flush yet", data: pkt(idA+" "+idB+" refs/heads/main\n") + "00",
			want: []string{"refs/heads/main 111111111111..222222222222"}, truncated: true},
		{name: "short pkt", data: "0fff" + idA, truncated: true},
		{name: "bad length", data: "zzzz", err: "bad pkt-line length"},
		{name: "length under four", data: "0003", err: "bad pkt-line length"},
		{name: "bad id", data: pkt("xyz "+idB+" refs/heads/main\n") + "0000", err: "bad ref update command"},
		{name: "mixed id lengths", data: pkt(idA+" "+idB+idB[:24]+" refs/heads/main\n") + "0000", err: "bad ref update command"},
		{name: "no ref", data: pkt(idA+" "+idB+"\n") + "0000", err: "bad ref update command"},
		{name: "escape in ref", data: pkt(idA+" "+idB+" refs/heads/\x1b[2J\n") + "0000",
			want: []string{`refs/heads/\u001b[2J 111111111111..222222222222`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, c, err := ParseGitPush("git.example.test/acme/tools.git", []byte(tc.data))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseGitPush(%q) error = %v, want %q", tc.data, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseGitPush(%q): %v", tc.data, err)
			}
			var got []string
			for _, u := range g.Updates {
				got = append(got, u.String())
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) || g.Count != len(tc.want) || len(c) != tc.caps || g.Truncated != tc.truncated || g.PushCert != tc.cert {
				t.Fatalf("ParseGitPush(%q) = %v count %d caps %v truncated %v cert %v, want %v caps %d truncated %v",
					tc.data, got, g.Count, c, g.Truncated, g.PushCert, tc.want, tc.caps, tc.truncated)
			}
		})
	}
}

func TestGitPushSummaryAndLimit(t *testing.T) {
	var b strings.Builder
	for i := 0; i < MaxRefUpdates+6; i++ {
		b.WriteString(pkt(fmt.Sprintf("%s %s refs/heads/b%d\n", idA, idB, i)))
	}
	b.WriteString("0000")
	g, _, err := ParseGitPush("r", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if g.Count != MaxRefUpdates+6 || len(g.Updates) != MaxRefUpdates {
		t.Fatalf("count %d, %d listed; want %d, %d", g.Count, len(g.Updates), MaxRefUpdates+6, MaxRefUpdates)
	}
	want := "push refs/heads/b0 111111111111..222222222222, refs/heads/b1 111111111111..222222222222, refs/heads/b2 111111111111..222222222222 and 67 more"
	if s := g.Summary(); s != want {
		t.Fatalf("Summary() = %q, want %q", s, want)
	}
	c := (&Preview{GitPush: g}).Clone()
	c.GitPush.Updates[0].Ref = "changed"
	if g.Updates[0].Ref == "changed" {
		t.Fatal("Clone shares the git push's updates")
	}
}

func FuzzParseGitPush(f *testing.F) {
	f.Add([]byte(pkt(idA+" "+idB+" refs/heads/main\x00report-status\n") + "0000PACK"))
	f.Add([]byte(pkt("push-cert\x00caps\n") + pkt(idA+" "+idB+" refs/heads/x\n") + pkt("push-cert-end\n") + "0000"))
	f.Add([]byte("0004"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, _, err := ParseGitPush("r", data)
		if err != nil {
			return
		}
		if len(g.Updates) > MaxRefUpdates || g.Count < len(g.Updates) {
			t.Fatalf("%d updates listed of %d", len(g.Updates), g.Count)
		}
		for _, u := range g.Updates {
			if !IsObjectID(u.Old) || !IsObjectID(u.New) || strings.ContainsAny(u.Ref, "\x00\x1b\r") {
				t.Fatalf("unsafe update %+v", u)
			}
		}
	})
}
