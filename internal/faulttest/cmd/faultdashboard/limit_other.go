//go:build !linux

package main

import "errors"

func capAddressSpace(uint64) (uint64, error) {
	return 0, errors.New("capping the address space needs Linux")
}
