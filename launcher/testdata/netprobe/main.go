// Command netprobe is a static helper for the launcher's real-container
// tests: "serve PORT TEXT" answers every HTTP request with TEXT, and
// "ifdown IFACE" tries to take an interface down (it must fail without
// CAP_NET_ADMIN).
package main

import (
	"fmt"
	"net/http"
	"os"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) != 4 && !(len(os.Args) == 3 && os.Args[1] == "ifdown") {
		fmt.Fprintln(os.Stderr, "usage: netprobe serve PORT TEXT | netprobe ifdown IFACE")
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
