package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// byteSize is a flag holding a size in bytes: a number with an optional
// K, M, G or T suffix (powers of 1024, as nats-server reads sizes; "KB",
// "KiB" and lower case work too), 0 for the default and -1 for no limit.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

// Type names the value in help.
func (b *byteSize) Type() string { return "size" }

func (b *byteSize) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

func parseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	if t == "-1" {
		return -1, nil
	}
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	mult := int64(1)
	if t != "" {
		switch t[len(t)-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(t), 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is not a size (e.g. 512M, 1G; 0 = default, -1 = no limit)", s)
	}
	return n * mult, nil
}
