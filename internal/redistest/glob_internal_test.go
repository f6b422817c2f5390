package redistest

import (
	"context"
	"slices"
	"testing"
)

func TestGlobEscape(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, ns := New(t)

	for _, tt := range []struct {
		literal string
		other   string // a key the unescaped pattern would also match
	}{
		{"a*b", "aXXb"},
		{"a?b", "aXb"},
		{"a[xy]b", "axb"},
		{`a\b`, "ab"},
		{"a]b^c-d", ""},
	} {
		t.Run(tt.literal, func(t *testing.T) {
			t.Parallel()
			base := ns + ":" + sanitize(t.Name()) + ":"
			keys := []string{base + tt.literal + ":1"}
			if tt.other != "" {
				keys = append(keys, base+tt.other+":1")
			}
			for _, k := range keys {
				if err := c.Set(ctx, k, "v", 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			var got []string
			iter := c.Scan(ctx, 0, globEscape(base+tt.literal)+"*", 1000).Iterator()
			for iter.Next(ctx) {
				got = append(got, iter.Val())
			}
			if err := iter.Err(); err != nil {
				t.Fatal(err)
			}
			if want := keys[:1]; !slices.Equal(got, want) {
				t.Fatalf("SCAN MATCH %q = %q, want %q", globEscape(base+tt.literal)+"*", got, want)
			}
		})
	}
}
