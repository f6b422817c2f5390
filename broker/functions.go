package broker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/job"
)

// Redis functions.
//
// The scripts can also run as Redis 7 functions, so that the Redis user of
// workers, producers, the CLI and the dashboard needs no right to run code
// of its own (EVAL, EVALSHA, SCRIPT, FUNCTION): an administrator loads the
// library once (LoadFunctions, `delayq admin load-functions`) and the
// broker, with Options.Functions, calls its functions with FCALL and
// FCALL_RO (`delayq acl --functions` prints such a user's rules).
//
// The library holds one function per script, wrapping the very code EVAL
// runs: `function(KEYS, ARGV) <prelude> <body> end`. Its name carries a
// hash of that code, delayq_<version>, and so does each function's,
// delayq_<version>_<script>: two builds with different scripts use
// different libraries, which can be loaded side by side during a rolling
// deploy, and a broker never calls a function of another build.
//
// Flags: the read-only scripts are "no-writes" (FCALL_RO runs them, on a
// replica too). Among the others, those that add data (enqueue, batches
// and their members, progress, pauses, rate limits, caps) have no flags,
// so Redis refuses them up front while used memory is over maxmemory;
// those that move, end or remove jobs are "allow-oom", so that workers can
// still drain a full server. (EVAL runs a script without flags, which
// Redis refuses only at its first write that may grow memory, if it
// wrote nothing before it.)

// ErrFunctionsNotLoaded is wrapped by the errors of a broker with
// Options.Functions whose server lacks this build's function library (not
// loaded, or only another version of it), or does not know FCALL (Redis
// before 7).
var ErrFunctionsNotLoaded = errors.New("broker: the function library of this version is not loaded")

// addsData are the scripts that can only grow memory: their functions
// are refused while Redis is over maxmemory (see above).
var addsData = map[string]bool{
	"enqueue": true, "batch_create": true, "batch_add": true, "progress": true,
	"pause": true, "limit": true, "cap": true, "keycap": true, "keypause": true,
	"keyrate": true, "keyfair": true, "keyweight": true,
}

// functionLibrary is the library built from allScripts.
type functionLibrary struct {
	name string // admin.FunctionLibraryPrefix + version
	code string // FUNCTION LOAD's argument
}

// library builds the library once, and names each script's function.
var library = sync.OnceValue(func() functionLibrary {
	flags := func(s *script) string {
		switch {
		case s.readOnly:
			return "'no-writes'"
		case addsData[s.name]:
			return ""
		}
		return "'allow-oom'"
	}
	h := sha256.New()
	for _, s := range allScripts {
		fmt.Fprintf(h, "%d:%s\n%d:%s\n%d:%s\n", len(s.name), s.name, len(flags(s)), flags(s), len(s.source()), s.source())
	}
	name := admin.FunctionLibraryPrefix + hex.EncodeToString(h.Sum(nil))[:16]
	var b strings.Builder
	b.WriteString("#!lua name=" + name + "\n")
	for _, s := range allScripts {
		s.fn = name + "_" + s.name
		fmt.Fprintf(&b, "redis.register_function{function_name='%s', flags={%s}, callback=function(KEYS, ARGV)\n%s\nend}\n", s.fn, flags(s), s.source())
	}
	return functionLibrary{name: name, code: b.String()}
})

// FunctionLibrary returns the name (admin.FunctionLibraryPrefix and a hash of
// the scripts) and the code of this build's function library, as
// LoadFunctions loads it: for an administrator who loads it by other
// means (FUNCTION LOAD with redis-cli).
func libraryCode() (name, code string) {
	l := library()
	return l.name, l.code
}

// LoadFunctions loads this build's function library (FunctionLibrary)
// into rdb's server, into every master of a cluster, and returns its name.
// A server that has it already is left as it is; libraries of other
// versions stay (remove them with DeleteFunctions once no process uses
// them). It needs a user allowed FUNCTION LOAD, and Redis 7. Redis
// replicates the library to replicas and keeps it in RDB and AOF files; a
// master added to a cluster later needs it loaded again (redis-cli
// --cluster add-node copies libraries).
func loadFunctions(ctx context.Context, rdb redis.UniversalClient) (string, error) {
	if rdb == nil {
		return "", errors.New("broker: LoadFunctions: nil redis client")
	}
	l := library()
	err := eachMaster(ctx, rdb, func(ctx context.Context, c redis.Cmdable) error {
		err := c.FunctionLoad(ctx, l.code).Err()
		if err != nil && strings.Contains(err.Error(), "already exists") {
			return nil // the name is a hash of the code: it is this library
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("broker: load function library %s: %w", l.name, functionsUnsupported(err))
	}
	return l.name, nil
}

// FunctionLibraries lists the delayq function libraries loaded on rdb's
// server (on every master of a cluster), sorted by name, and how many
// masters were asked. It needs a user allowed FUNCTION LIST.
func functionLibraries(ctx context.Context, rdb redis.UniversalClient) ([]admin.FunctionLibraryStatus, int, error) {
	if rdb == nil {
		return nil, 0, errors.New("broker: FunctionLibraries: nil redis client")
	}
	var mu sync.Mutex
	count := map[string]int{}
	masters := 0
	err := eachMaster(ctx, rdb, func(ctx context.Context, c redis.Cmdable) error {
		libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: admin.FunctionLibraryPrefix + "*"}).Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		masters++
		for _, l := range libs {
			count[l.Name]++
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("broker: list function libraries: %w", functionsUnsupported(err))
	}
	out := make([]admin.FunctionLibraryStatus, 0, len(count))
	for name, n := range count {
		out = append(out, admin.FunctionLibraryStatus{Name: name, Current: name == library().name, Masters: n})
	}
	slices.SortFunc(out, func(a, b admin.FunctionLibraryStatus) int { return strings.Compare(a.Name, b.Name) })
	return out, masters, nil
}

// DeleteFunctions removes the delayq function library name from rdb's
// server (from every master of a cluster that has it): an old version,
// once no process of its build runs. A broker with Options.Functions of
// that build then fails with ErrFunctionsNotLoaded. A name that is not a
// delayq library's is refused (job.ErrInvalid); one that no server holds
// is not an error.
func deleteFunctions(ctx context.Context, rdb redis.UniversalClient, name string) error {
	if rdb == nil {
		return errors.New("broker: DeleteFunctions: nil redis client")
	}
	v, ok := strings.CutPrefix(name, admin.FunctionLibraryPrefix)
	if !ok || v == "" || strings.Trim(v, "0123456789abcdef") != "" {
		return fmt.Errorf("broker: %w: %q is not the name of a delayq function library (%s and a hex version)", job.ErrInvalid, name, admin.FunctionLibraryPrefix)
	}
	err := eachMaster(ctx, rdb, func(ctx context.Context, c redis.Cmdable) error {
		err := c.FunctionDelete(ctx, name).Err()
		if err != nil && strings.Contains(err.Error(), "Library not found") {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("broker: delete function library %s: %w", name, functionsUnsupported(err))
	}
	return nil
}

// eachMaster runs fn on rdb, or on every master of a cluster client.
func eachMaster(ctx context.Context, rdb redis.UniversalClient, fn func(context.Context, redis.Cmdable) error) error {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return fn(ctx, c) })
	}
	return fn(ctx, rdb)
}

// functionsUnsupported adds to err, when the server does not know the
// function commands, that they need Redis 7.
func functionsUnsupported(err error) error {
	if err != nil && strings.Contains(strings.ToLower(err.Error()), "unknown command") {
		return fmt.Errorf("%w (Redis functions need Redis 7 or later)", err)
	}
	return err
}

// functionErr maps an error of FCALL or FCALL_RO of s: a function the
// server lacks, or a server without FCALL, wraps ErrFunctionsNotLoaded and
// says what to do; any other error is err.
func functionErr(s *script, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "ERR Function not found"):
		return fmt.Errorf("%w: the server has no function %s (library %s); load it with `delayq admin load-functions` (a library of another version may be loaded): %w",
			ErrFunctionsNotLoaded, s.fn, library().name, err)
	case strings.Contains(strings.ToLower(msg), "unknown command") && strings.Contains(strings.ToLower(msg), "fcall"):
		return fmt.Errorf("%w: the server does not know FCALL (Redis functions need Redis 7 or later): %w", ErrFunctionsNotLoaded, err)
	}
	return err
}

// fcall sends s as FCALL (FCALL_RO when it is read-only) of its function
// through c.
func fcall(ctx context.Context, c redis.Cmdable, s *script, keys []string, argv []any) *redis.Cmd {
	library() // names the functions
	if s.readOnly {
		return c.FCallRO(ctx, s.fn, keys, argv...)
	}
	return c.FCall(ctx, s.fn, keys, argv...)
}
