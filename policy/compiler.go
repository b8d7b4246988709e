package policy

import "sync"

// Compiler compiles Snapshots as Compile does, but builds each connector
// package once: a connector whose Hash (its package digest) and FQN it built
// for its previous Compile is reused, so successive snapshots, and every
// session reading them, share that connector's compiled operations and
// index instead of rebuilding them on each reload. A new version of a
// package has a new hash and is built afresh. Connectors without a Hash are
// built every time.
//
// It remembers only the connectors of its last successful Compile, so it
// holds no more than the active set; a failed Compile leaves it unchanged.
// The zero value is ready to use, and it is safe for concurrent use.
type Compiler struct {
	mu     sync.Mutex
	built  map[string]*compiledConnector // Hash → connector, from the last Compile
	builds uint64
}

// Compile indexes the connectors into a Snapshot, reusing what the previous
// Compile built for the same packages; see the package function Compile for
// what it checks. Hash must be the digest of the package's content (as the
// Store reports it), so that the same Hash always means the same spec.
func (c *Compiler) Compile(conns []Connector) (*Snapshot, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := make(map[string]*compiledConnector, len(conns))
	builds := c.builds
	s, err := compile(conns, func(conn Connector) (*compiledConnector, error) {
		if cc := c.built[conn.Hash]; cc != nil && conn.Hash != "" && cc.conn.Spec.Connector.FQN == conn.Spec.Connector.FQN {
			next[conn.Hash] = cc
			return cc, nil
		}
		cc, err := compileConnector(conn)
		if err != nil {
			return nil, err
		}
		builds++
		if conn.Hash != "" {
			next[conn.Hash] = cc
		}
		return cc, nil
	})
	if err != nil {
		return nil, err
	}
	c.built, c.builds = next, builds
	return s, nil
}

// Builds returns how many connectors the Compiler has built (not reused)
// since it was made: a figure for metrics and tests.
func (c *Compiler) Builds() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.builds
}
