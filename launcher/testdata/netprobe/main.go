// Command netprobe is a static helper for the launcher's real-container
// tests: "serve PORT TEXT" answers every HTTP request with TEXT, and
// "ifdown IFACE" tries to take an interface down (it must fail without
// CAP_NET_ADMIN), "dns NAME" reports whether any nameserver of
// /etc/resolv.conf answers an A query for NAME (any reply counts; /etc/hosts
// is not read).
package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) != 4 && !(len(os.Args) == 3 && (os.Args[1] == "ifdown" || os.Args[1] == "dns")) {
		fmt.Fprintln(os.Stderr, "usage: netprobe serve PORT TEXT | netprobe ifdown IFACE | netprobe dns NAME")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		text := os.Args[3]
		err := http.ListenAndServe(":"+os.Args[2], http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprint(w, text)
		}))
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	case "ifdown":
		if err := ifdown(os.Args[2]); err != nil {
			fmt.Println("ifdown failed:", err)
			os.Exit(1)
		}
		fmt.Println("ifdown ok")
	case "dns":
		if srv, err := dnsAnswers(os.Args[2]); err != nil {
			fmt.Println("dns failed:", err)
			os.Exit(1)
		} else {
			fmt.Println("dns answered by", srv)
		}
	}
}

func ifdown(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() &^ unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// dnsAnswers sends one A query for name over UDP to each nameserver of
// /etc/resolv.conf and returns the first that replies.
func dnsAnswers(name string) (string, error) {
	raw, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return "", err
	}
	q := []byte{0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, label := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		q = append(append(q, byte(len(label))), label...)
	}
	q = append(q, 0, 0, 1, 0, 1)
	var errs []error
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		srv := net.JoinHostPort(f[1], "53")
		c, err := net.DialTimeout("udp", srv, 3*time.Second)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		buf := make([]byte, 512)
		_, err = c.Write(q)
		if err == nil {
			_, err = c.Read(buf)
		}
		c.Close()
		if err == nil {
			return srv, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return "", errors.New("no nameserver in /etc/resolv.conf")
	}
	return "", errors.Join(errs...)
}
