package broker

import (
	"embed"
	"regexp"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

//go:embed scripts/*.lua
var scriptFS embed.FS

// script is one Lua script of scripts/, with what its header declares.
// Its code (the prelude it uses, then the body) is put together by the
// first New of the process (prepareScripts), not at program start: a
// program that imports the package and makes no broker pays nothing for
// it.
type script struct {
	name string
	body string
	// readOnly: the header says "-- read-only": the script changes
	// nothing, so a durable broker need not wait for replicas after it.
	readOnly bool
	// fn is the script's function in the library (see functions.go).
	fn string
	// prepared returns what EVAL runs and the script with its SHA1.
	prepared func() prepared
}

// prepared is a script's code and the go-redis Script that sends it.
type prepared struct {
	src string
	lua *redis.Script
}

// source is what EVAL runs: the prelude the body uses, then the body.
func (s *script) source() string { return s.prepared().src }

// lua is the go-redis Script of source.
func (s *script) lua() *redis.Script { return s.prepared().lua }

// allScripts are the scripts load made, in order: the function library
// holds each of them.
var allScripts []*script

// readOnlyMark is the header line of a script that changes nothing.
const readOnlyMark = "-- read-only"

// load returns the named script, whose code gets the parts of the shared
// prelude it uses (see preludeFor) when it is prepared.
func load(name string) *script {
	body, err := scriptFS.ReadFile("scripts/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	s := &script{name: name, body: string(body)}
	s.prepared = sync.OnceValue(func() prepared {
		src := thePrelude().partFor(s.body) + "\n" + s.body
		return prepared{src: src, lua: redis.NewScript(src)}
	})
	allScripts = append(allScripts, s)
	for line := range strings.SplitSeq(s.body, "\n") {
		if !strings.HasPrefix(line, "--") {
			break // the header is the leading comment
		}
		if strings.TrimSpace(line) == readOnlyMark {
			s.readOnly = true
		}
	}
	return s
}

// definedRE finds what a paragraph of the prelude defines: its top-level
// local functions and values.
var definedRE = regexp.MustCompile(`(?m)^local (?:function )?([A-Za-z_]\w*)`)

// commentRE matches a Lua line comment (the scripts' strings hold no
// "--") or a string literal: what is not code naming a definition.
var commentRE = regexp.MustCompile(`--[^\n]*|'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"`)

// preludeFor returns the paragraphs of prelude (blocks between blank lines)
// that define a name body uses, directly or through another such paragraph,
// in their order. Every call of a script runs its prelude again, defining
// each function anew: a single-job enqueue spent about 1.5 µs of its 13 on
// the functions it never called.
//
// A name is used where it stands as a whole word of the code (comments
// and strings left out): each text is split into its words once, so that
// preparing the scripts costs no regular expression per name.
func preludeFor(prelude, body string) string {
	return parsePrelude(prelude).partFor(body)
}

// preludeParts is the prelude split into paragraphs, with what each
// defines and the words of its code.
type preludeParts struct {
	paras   []string
	defines [][]string
	code    []map[string]bool // words, without comments and strings
}

func parsePrelude(prelude string) *preludeParts {
	pp := &preludeParts{paras: strings.Split(prelude, "\n\n")}
	pp.defines = make([][]string, len(pp.paras))
	pp.code = make([]map[string]bool, len(pp.paras))
	for i, p := range pp.paras {
		for _, m := range definedRE.FindAllStringSubmatch(p, -1) {
			pp.defines[i] = append(pp.defines[i], m[1])
		}
		pp.code[i] = words(commentRE.ReplaceAllString(p, ""))
	}
	return pp
}

// thePrelude is scripts/prelude.lua, parsed once.
var thePrelude = sync.OnceValue(func() *preludeParts {
	prelude, err := scriptFS.ReadFile("scripts/prelude.lua")
	if err != nil {
		panic(err)
	}
	return parsePrelude(string(prelude))
})

// partFor is preludeFor of the parsed prelude.
func (pp *preludeParts) partFor(body string) string {
	bodyWords := words(commentRE.ReplaceAllString(body, ""))
	keep := make([]bool, len(pp.paras))
	for changed := true; changed; {
		changed = false
		for i, names := range pp.defines {
			if keep[i] {
				continue
			}
			for _, name := range names {
				used := bodyWords[name]
				for j := range pp.paras {
					if keep[j] && j != i && pp.code[j][name] {
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
	for i, p := range pp.paras {
		if keep[i] {
			out = append(out, p)
		}
	}
	return strings.Join(out, "\n\n")
}

// words returns the set of text's words: its longest runs of letters,
// digits and '_', where regexp's \b finds word boundaries.
func words(text string) map[string]bool {
	set := map[string]bool{}
	start := -1
	for i := 0; i <= len(text); i++ {
		if i < len(text) && isWordByte(text[i]) {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			set[text[start:i]] = true
			start = -1
		}
	}
	return set
}

func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

var (
	enqueueScript     = load("enqueue")
	pauseScript       = load("pause")
	limitScript       = load("limit")
	capScript         = load("cap")
	keyCapScript      = load("keycap")
	keyPauseScript    = load("keypause")
	keyRateScript     = load("keyrate")
	keyFairScript     = load("keyfair")
	keyWeightScript   = load("keyweight")
	keysScript        = load("keys")
	claimScript       = load("claim")
	settleScript      = load("settle")
	extendScript      = load("extend")
	reapScript        = load("reap")
	cancelScript      = load("cancel")
	rescheduleScript  = load("reschedule")
	redriveScript     = load("redrive")
	deadDeleteScript  = load("dead_delete")
	trimScript        = load("trim")
	statsScript       = load("stats")
	jobScript         = load("job")
	pageScript        = load("page")
	batchCreateScript = load("batch_create")
	batchAddScript    = load("batch_add")
	batchEndScript    = load("batch_end")
	batchFiredScript  = load("batch_fired")
	batchClearScript  = load("batch_clear")
	deadAddScript     = load("dead_add")
	progressScript    = load("progress")
	takeTrimmedScript = load("take_trimmed")
)

// prepareScripts puts every script's code together, once per process: New
// calls it, so that no call of a broker pays for it (nor allocates for it
// in the middle of a request).
var prepareScripts = sync.OnceFunc(func() {
	for _, s := range allScripts {
		s.prepared()
	}
})
