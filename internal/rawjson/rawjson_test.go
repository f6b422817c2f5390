package rawjson

import "testing"

func TestIsCompact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{
		`{"a":[1,2.5],"b":"x y\"z \\"}`: true,
		`"<script>"`:                    true,
		`{"a": 1}`:                      false,
		` 1`:                            false,
		"[1,\n2]":                       false,
		`{"a":1`:                        false,
		``:                              false,
		"\"tab\tinside\"":               false, // invalid JSON: a raw tab inside a string
		`"tab\tescaped"`:                true,
	} {
		if got := IsCompact([]byte(in)); got != want {
			t.Errorf("IsCompact(%q) = %v, want %v", in, got, want)
		}
	}
}
