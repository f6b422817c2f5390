package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// capAddressSpace sets RLIMIT_AS to the address space the process has
// mapped now (VmSize) plus headroom bytes, and returns the limit.
func capAddressSpace(headroom uint64) (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var size uint64
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmSize:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmSize %q: %w", v, err)
			}
			size = kb << 10
		}
	}
	if size == 0 {
		return 0, fmt.Errorf("no VmSize in /proc/self/status")
	}
	limit := size + headroom
	if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
		return 0, fmt.Errorf("setrlimit RLIMIT_AS %d: %w", limit, err)
	}
	return limit, nil
}
