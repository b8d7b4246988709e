//go:build !linux

package audit

import "os"

// osFile is the File over the log Open opens. Outside Linux nothing is
// allocated ahead: a full disk is found by a failed write.
type osFile struct{ *os.File }

func (f *osFile) Size() (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (f *osFile) Allocate(off, n int64) error { return nil }

func (f *osFile) Release(off, n int64) error { return nil }
