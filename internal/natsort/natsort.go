// Package natsort orders names the way people read them: digit runs
// compare as numbers, so "w2" comes before "w10".
package natsort

import (
	"cmp"
	"strings"
)

// Compare orders a and b with their digit runs compared as numbers
// ("pool-2" < "pool-10"; leading zeros do not count), the rest byte by
// byte. It returns -1, 0 or +1 like strings.Compare.
func Compare(a, b string) int {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da != "" && db != "" {
			na, nb := strings.TrimLeft(da, "0"), strings.TrimLeft(db, "0")
			if c := cmp.Or(cmp.Compare(len(na), len(nb)), strings.Compare(na, nb)); c != 0 {
				return c
			}
			a, b = a[len(da):], b[len(db):]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func digits(s string) string {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}
