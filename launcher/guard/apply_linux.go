//go:build linux

package guard

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/nftables"
)

// ApplyGuard installs rs in the current network namespace in one netlink
// transaction, replacing a previous table of the same name, then reads it
// back and fails unless the kernel holds exactly rs. It needs CAP_NET_ADMIN
// in the namespace; the holder container has it, the agent's does not.
func Apply(rs *Ruleset) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("installing the egress guard: opening netlink: %w", err)
	}
	if old, err := c.ListTableOfFamily(rs.Table.Name, rs.Table.Family); err == nil && old != nil {
		c.DelTable(old)
	}
	c.AddTable(rs.Table)
	for _, ch := range rs.Chains {
		c.AddChain(ch.Chain)
		for _, r := range ch.Rules {
			c.AddRule(&nftables.Rule{Table: rs.Table, Chain: ch.Chain, Exprs: r})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("installing the egress guard: the kernel refused the nftables ruleset: %w (the runtime must grant CAP_NET_ADMIN to the holder container and the kernel must support nf_tables with nft_reject_inet and nf_conntrack)", err)
	}
	got, err := Read()
	if err != nil {
		return err
	}
	if want := rs.Lines(); !slices.Equal(got, want) {
		return fmt.Errorf("installing the egress guard: the kernel holds\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	return nil
}

// ReadGuard reads the guard table back from the current network namespace,
// rendered as GuardRuleset.Lines renders it (chains sorted by name).
func Read() ([]string, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("reading the egress guard: opening netlink: %w", err)
	}
	t, err := c.ListTableOfFamily(Table, nftables.TableFamilyINet)
	if err != nil || t == nil {
		return nil, errors.Join(errors.New("reading the egress guard: no table inet "+Table+" in this network namespace"), err)
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("reading the egress guard: listing chains: %w", err)
	}
	rs := &Ruleset{Table: t}
	for _, ch := range chains {
		if ch.Table == nil || ch.Table.Name != Table {
			continue
		}
		rules, err := c.GetRules(t, ch)
		if err != nil {
			return nil, fmt.Errorf("reading the egress guard: listing the rules of chain %s: %w", ch.Name, err)
		}
		gc := Chain{Chain: ch}
		for _, r := range rules {
			gc.Rules = append(gc.Rules, r.Exprs)
		}
		rs.Chains = append(rs.Chains, gc)
	}
	slices.SortFunc(rs.Chains, func(a, b Chain) int { return strings.Compare(a.Chain.Name, b.Chain.Name) })
	return rs.Lines(), nil
}
