// Package rawjson keeps bytes embedded in JSON documents byte for byte.
//
// encoding/json re-encodes a json.RawMessage: it drops insignificant
// whitespace and, with HTML escaping on (json.Marshal's default), rewrites
// '<', '>', '&', U+2028 and U+2029. Stored envelopes and dead records embed
// payloads and bodies that must come back exactly as they were given, so they
// embed only what [IsCompact] accepts and are encoded with [Marshal].
package rawjson

import (
	"bytes"
	"encoding/json"
)

// IsCompact reports whether b is valid JSON that [Marshal] embeds unchanged
// as a json.RawMessage: valid and without insignificant whitespace. Other
// bytes must be stored another way (e.g. base64 in a []byte field).
func IsCompact(b []byte) bool {
	return json.Valid(b) && !spaceOutsideStrings(b)
}

// spaceOutsideStrings reports whether valid JSON b has insignificant white
// space: one pass, no allocation.
func spaceOutsideStrings(b []byte) bool {
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return true
		}
	}
	return false
}

// Marshal is json.Marshal without HTML escaping, so raw JSON accepted by
// [IsCompact] is embedded byte for byte.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
