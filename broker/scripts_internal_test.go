package broker

import (
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/naming"
)

// singleKey lists the commands scripts may call on a key: each takes one
// key, as its first argument. A command outside the list (or one taking
// several keys) needs a look at its key handling before it is added.
var singleKey = map[string]bool{
	"ZADD": true, "ZREM": true, "ZSCORE": true, "ZCARD": true, "ZCOUNT": true, "ZRANGE": true,
	"ZRANGEBYSCORE": true, "ZREMRANGEBYRANK": true, "ZPOPMIN": true,
	"HGET": true, "HSET": true, "HSETNX": true, "HDEL": true, "HEXISTS": true, "HINCRBY": true,
	"INCR": true, "INCRBY": true, "GET": true, "SET": true, "ZRANK": true, "HMGET": true,
	"TYPE": true, "EXISTS": true, "PEXPIRE": true, "PTTL": true, "ZMSCORE": true, "ZREMRANGEBYSCORE": true, "HGETALL": true, "HKEYS": true,
	"LLEN": true, "RPUSH": true, "LRANGE": true, "LTRIM": true,
	"SADD": true, "SREM": true, "SMEMBERS": true, "HLEN": true, "ZREVRANGE": true, "HSCAN": true, "ZINCRBY": true,
	"DEL": true, // called with one key
}

// keyless lists commands that touch no key: PUBLISH's channel is not a key
// (on a cluster it reaches subscribers on every node).
var keyless = map[string]bool{"TIME": true, "PUBLISH": true}

var (
	callRE     = regexp.MustCompile(`redis\.call\(\s*'(\w+)'\s*(?:,\s*([^,)]+))?`)
	declaredRE = regexp.MustCompile(`(?m)^-- (KEYS\[\d+\]) ->(.*)$`)
	// A key named under a prefix (a per-type key): KEYS[n] .. name, where
	// the header declares KEYS[n] as a prefix. Its slot is the prefix's.
	// A key's held set is KEYS[n] .. '#' .. key.
	prefixedRE = regexp.MustCompile(`^(KEYS\[\d+\]) \.\. (?:'#' \.\. )?\w+$`)
	keysUseRE  = regexp.MustCompile(`KEYS\[\d+\]`)
	// prelude helpers and how many leading arguments of each are keys.
	helperRE = regexp.MustCompile(`\b(holds|lease_state|held|wake_if_earliest|trim_dead|tidy_unique|call_chunked|hmget|earliest|next_ready|history|recorded|record|endings|release_held|key_release|held_add|key_hold|turn_join|zmscore|read_chunked)\(([^)]*)\)`)
)

// helperKeys gives, for each prelude helper, the positions of its key
// arguments.
var helperKeys = map[string][]int{
	"holds": {0}, "lease_state": {0, 1}, "held": {0}, "wake_if_earliest": {0}, "trim_dead": {0, 1}, "tidy_unique": {0}, "call_chunked": {1},
	"hmget": {0}, "earliest": {0}, "next_ready": {0}, "history": {0}, "recorded": {0}, "record": {0}, "endings": {0, 1}, "release_held": {0, 1},
	"key_release": {0, 1, 2, 3}, "held_add": {0}, "key_hold": {0, 1}, "turn_join": {0}, "zmscore": {0}, "read_chunked": {1},
}

// TestScriptsTouchOnlyDeclaredKeys checks statically that every key a
// script reaches is one of its KEYS, declared in its header, so that on a
// cluster it runs in the slot of the queue's hash tag and nowhere else.
func TestScriptsTouchOnlyDeclaredKeys(t *testing.T) {
	t.Parallel()
	prelude, err := scriptFS.ReadFile("scripts/prelude.lua")
	if err != nil {
		t.Fatal(err)
	}
	// In the prelude, key arguments are the helpers' parameters.
	for _, m := range callRE.FindAllStringSubmatch(string(prelude), -1) {
		cmd, arg := m[1], strings.TrimSpace(m[2])
		switch {
		case keyless[cmd]:
		case !singleKey[cmd]:
			t.Errorf("prelude.lua calls %s, which is not a known single-key command", cmd)
		case arg != "scheduled" && arg != "leases" && arg != "processing" && arg != "dead" && arg != "index" && arg != "key" && arg != "zset" &&
			arg != "counts" && arg != "trimmed" && arg != "unique":
			t.Errorf("prelude.lua calls %s on %q, not on a helper's key parameter", cmd, arg)
		}
	}
	names, err := fs.Glob(scriptFS, "scripts/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range names {
		if name == "scripts/prelude.lua" {
			continue
		}
		checked++
		body, err := scriptFS.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		src := string(body)
		declared, prefixes := map[string]bool{}, map[string]bool{}
		for _, m := range declaredRE.FindAllStringSubmatch(src, -1) {
			declared[m[1]] = true
			if strings.Contains(m[2], "prefix") {
				prefixes[m[1]] = true
			}
		}
		isKey := func(arg string) bool {
			if keysUseRE.FindString(arg) == arg {
				return true
			}
			m := prefixedRE.FindStringSubmatch(arg)
			return m != nil && prefixes[m[1]]
		}
		code := stripComments(src)
		for _, k := range keysUseRE.FindAllString(code, -1) {
			if !declared[k] {
				t.Errorf("%s uses %s, which its header does not declare", name, k)
			}
		}
		for _, m := range callRE.FindAllStringSubmatch(code, -1) {
			cmd, arg := m[1], strings.TrimSpace(m[2])
			switch {
			case keyless[cmd]:
			case !singleKey[cmd]:
				t.Errorf("%s calls %s, which is not a known single-key command", name, cmd)
			case !isKey(arg):
				t.Errorf("%s calls %s on %q, not on one of KEYS", name, cmd, arg)
			}
		}
		for _, m := range helperRE.FindAllStringSubmatch(code, -1) {
			args := strings.Split(m[2], ",")
			for _, i := range helperKeys[m[1]] {
				if a := strings.TrimSpace(args[i]); !isKey(a) {
					t.Errorf("%s passes %q as a key to %s", name, a, m[1])
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked %d scripts; the glob found too few", checked)
	}
}

func stripComments(src string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(src, "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// TestScriptCommandsInACL checks that every command a script calls is one
// the ACL rules allow (Redis checks a script's commands against the
// caller's ACL): a command missing there fails only for users given
// ACLRules, at the first call that reaches it.
func TestScriptCommandsInACL(t *testing.T) {
	t.Parallel()
	allowed := map[string]bool{}
	for _, r := range strings.Fields(admin.ACLRules("ns")) {
		if c, ok := strings.CutPrefix(r, "+"); ok {
			allowed[strings.ToUpper(c)] = true
		}
	}
	names, err := fs.Glob(scriptFS, "scripts/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	anyCall := regexp.MustCompile(`redis\.p?call\(\s*'(\w+)'`)
	for _, name := range names {
		body, err := scriptFS.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range anyCall.FindAllStringSubmatch(stripComments(string(body)), -1) {
			if !allowed[strings.ToUpper(m[1])] {
				t.Errorf("%s calls %s, which ACLRules does not allow", name, m[1])
			}
		}
	}
}

// TestPreludeHasWhatEachScriptUses checks that the part of the prelude
// loaded with each script defines every prelude name the script, or a
// definition loaded with it, uses; and that what a script does not use is
// left out.
func TestPreludeHasWhatEachScriptUses(t *testing.T) {
	t.Parallel()
	prelude, err := scriptFS.ReadFile("scripts/prelude.lua")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range definedRE.FindAllStringSubmatch(string(prelude), -1) {
		names = append(names, m[1])
	}
	if len(names) < 10 {
		t.Fatalf("found %d definitions in prelude.lua: %v", len(names), names)
	}
	entries, err := fs.ReadDir(scriptFS, "scripts")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".lua")
		if name == "prelude" {
			continue
		}
		body, err := scriptFS.ReadFile("scripts/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		part := preludeFor(string(prelude), string(body))
		code := commentRE.ReplaceAllString(part+"\n"+string(body), "")
		defined := map[string]bool{}
		for _, m := range definedRE.FindAllStringSubmatch(part, -1) {
			defined[m[1]] = true
		}
		for _, n := range names {
			if regexp.MustCompile(`\b`+n+`\b`).MatchString(code) && !defined[n] {
				t.Errorf("%s.lua uses %s, which its prelude does not define", name, n)
			}
		}
	}
	enqueue, _ := scriptFS.ReadFile("scripts/enqueue.lua")
	part := preludeFor(string(prelude), string(enqueue))
	for _, n := range []string{"trim_dead", "history", "held", "type_of"} {
		if strings.Contains(part, "local function "+n+"(") {
			t.Errorf("enqueue.lua is loaded with %s, which it does not use", n)
		}
	}
	if !strings.Contains(part, "local function now_us(") || !strings.Contains(part, "local function expect(") {
		t.Errorf("enqueue.lua is loaded without now_us or expect:\n%s", part)
	}
}

// TestPreludeForAsByRegexp: preludeFor, which splits each text into words
// once, keeps for every script exactly the paragraphs that a test of each
// name as a \b-bounded regular expression keeps, so the scripts (and their
// SHA1s) are what they were.
func TestPreludeForAsByRegexp(t *testing.T) {
	t.Parallel()
	byRegexp := func(prelude, body string) string {
		paras := strings.Split(prelude, "\n\n")
		defines := make([][]string, len(paras))
		code := make([]string, len(paras))
		for i, p := range paras {
			for _, m := range definedRE.FindAllStringSubmatch(p, -1) {
				defines[i] = append(defines[i], m[1])
			}
			code[i] = commentRE.ReplaceAllString(p, "")
		}
		body = commentRE.ReplaceAllString(body, "")
		uses := func(text, name string) bool { return regexp.MustCompile(`\b` + name + `\b`).MatchString(text) }
		keep := make([]bool, len(paras))
		for changed := true; changed; {
			changed = false
			for i, names := range defines {
				if keep[i] {
					continue
				}
				for _, name := range names {
					used := uses(body, name)
					for j := range paras {
						if keep[j] && j != i && uses(code[j], name) {
							used = true
						}
					}
					if used {
						keep[i], changed = true, true
						break
					}
				}
			}
		}
		var out []string
		for i, p := range paras {
			if keep[i] {
				out = append(out, p)
			}
		}
		return strings.Join(out, "\n\n")
	}
	prelude, err := scriptFS.ReadFile("scripts/prelude.lua")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := fs.ReadDir(scriptFS, "scripts")
	if err != nil {
		t.Fatal(err)
	}
	bodies := map[string]string{
		"a name inside a longer word": "local x = held_jobs(1)\nlocal y = xhistory",
		"a name after a digit":        "return 1history",
		"a name in a comment":         "-- history(1)\nreturn 1",
	}
	for _, e := range entries {
		b, err := scriptFS.ReadFile("scripts/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		bodies[e.Name()] = string(b)
	}
	for name, body := range bodies {
		if got, want := preludeFor(string(prelude), body), byRegexp(string(prelude), body); got != want {
			t.Errorf("%s: preludeFor keeps\n%s\nwant\n%s", name, got, want)
		}
	}
	for in, want := range map[string]string{"": "", "a b_c 1d": "1d a b_c", "x.y(z)--w": "w x y z", "é_1": "_1"} {
		var got []string
		for w := range words(in) {
			got = append(got, w)
		}
		slices.Sort(got)
		if strings.Join(got, " ") != want {
			t.Errorf("words(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestEncodingFieldNamedAlike: the field the claim keeps in the attempts
// and leases hashes is the one keyspace.EncodingField names, which tests
// and tools leave out of a hash's job ids; and it can be no job id.
func TestEncodingFieldNamedAlike(t *testing.T) {
	want := "local HASHTABLE_FIELD = '" + keyspace.EncodingField + "'\n"
	if body, _ := scriptFS.ReadFile("scripts/prelude.lua"); !strings.Contains(string(body), want) {
		t.Errorf("prelude.lua does not define %q", strings.TrimSpace(want))
	}
	if err := naming.ID(keyspace.EncodingField); err == nil {
		t.Errorf("%q is a valid job id; the encoding field must be none", keyspace.EncodingField)
	}
}
