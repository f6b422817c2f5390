package job

import (
	"maps"
	"sync"
	"sync/atomic"
)

// typeNames holds the names of the types this program declared (New),
// so that Decode gives a stored job's type as the declared string instead
// of allocating a copy per job. The map is replaced, never changed: reads
// take no lock. At most maxTypeNames are kept; the others are copied.
var typeNames struct {
	mu sync.Mutex // serializes writers
	m  atomic.Pointer[map[string]string]
}

const maxTypeNames = 1024

// internTypeName keeps name for typeName.
func internTypeName(name string) {
	typeNames.mu.Lock()
	defer typeNames.mu.Unlock()
	old := typeNames.m.Load()
	if old != nil {
		if _, ok := (*old)[name]; ok || len(*old) >= maxTypeNames {
			return
		}
	}
	m := map[string]string{}
	if old != nil {
		m = maps.Clone(*old)
	}
	m[name] = name
	typeNames.m.Store(&m)
}

// typeName returns b as a string: a declared type's name without an
// allocation, else a copy.
func typeName(b []byte) string {
	if m := typeNames.m.Load(); m != nil {
		if name, ok := (*m)[string(b)]; ok {
			return name
		}
	}
	return string(b)
}
