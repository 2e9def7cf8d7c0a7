// Package memsearch is memory_search's index: Markdown files cut into
// chunks of lines, and a BM25 ranking of the chunks for a query (k1 1.2,
// b 0.75), with no embeddings. It is pure: callers read the files and
// hand it their text.
//
// Files: memsearch.go (chunks, tokens, ranking).
package memsearch

import (
	"math"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Chunking bounds.
const (
	// ChunkLines is the most lines of one chunk.
	ChunkLines = 20
	// ChunkBytes is the most bytes of one chunk (a longer line is a chunk
	// of its own).
	ChunkBytes = 1200
	// MaxTokenBytes drops longer tokens (base64, hashes) from the index.
	MaxTokenBytes = 64
	// MaxQueryTerms bounds the distinct terms a query is ranked by.
	MaxQueryTerms = 32
)

// BM25 parameters.
const (
	k1 = 1.2
	b  = 0.75
)

// Chunk is a run of lines of one file.
type Chunk struct {
	Path      string // as the caller named the file
	StartLine int    // 1-based, inclusive
	EndLine   int
	Text      string
	length    int32 // tokens
}

// File is one file's chunks and their inverted index.
type File struct {
	Chunks   []Chunk
	postings map[string][]posting
	tokens   int64
}

// posting is a term's count in one chunk.
type posting struct {
	chunk int32
	tf    int32
}

// Split cuts a file's text into chunks and indexes them: at most
// ChunkLines lines and ChunkBytes bytes each, cut preferably before a
// heading or after a blank line, so a chunk is a section or paragraph
// where the file has them.
func Split(path, text string) *File {
	f := &File{postings: map[string][]posting{}}
	lines := strings.SplitAfter(text, "\n")
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1]
	}
	start, size := 0, 0
	flush := func(end int) {
		if end <= start {
			return
		}
		body := strings.Join(lines[start:end], "")
		if strings.TrimSpace(body) != "" {
			f.add(Chunk{Path: path, StartLine: start + 1, EndLine: end, Text: strings.TrimRight(body, "\n")})
		}
		start, size = end, 0
	}
	for i, l := range lines {
		heading := strings.HasPrefix(l, "#")
		if i > start && (heading || i-start >= ChunkLines || size+len(l) > ChunkBytes) {
			flush(i)
		}
		size += len(l)
		if strings.TrimSpace(l) == "" && i-start >= ChunkLines/2 {
			flush(i + 1)
		}
	}
	flush(len(lines))
	return f
}

func (f *File) add(c Chunk) {
	idx := int32(len(f.Chunks))
	counts := map[string]int32{}
	for _, t := range Tokens(c.Text) {
		counts[t]++
		c.length++
	}
	for t, n := range counts {
		f.postings[t] = append(f.postings[t], posting{chunk: idx, tf: n})
	}
	f.tokens += int64(c.length)
	f.Chunks = append(f.Chunks, c)
}

// Tokens lowercases s and splits it into runs of letters and digits,
// dropping those over MaxTokenBytes.
func Tokens(s string) []string {
	var out []string
	start := -1
	for i, r := range s {
		word := unicode.IsLetter(r) || unicode.IsDigit(r)
		if word && start < 0 {
			start = i
		}
		if !word && start >= 0 {
			out = appendToken(out, s[start:i])
			start = -1
		}
	}
	if start >= 0 {
		out = appendToken(out, s[start:])
	}
	return out
}

func appendToken(out []string, t string) []string {
	if len(t) > MaxTokenBytes || (len(t) == 1 && t[0] < utf8.RuneSelf && !unicode.IsDigit(rune(t[0]))) {
		return out // too long to be a word; a single ASCII letter says nothing
	}
	return append(out, strings.ToLower(t))
}

// Hit is a ranked chunk.
type Hit struct {
	*Chunk
	Score float64
}

// Search ranks the chunks of files for query by BM25 and returns the
// best n (ties in file and line order) whose score is at least minScore.
// A query without terms finds nothing. Only the chunks holding a query
// term are looked at.
func Search(files []*File, query string, n int, minScore float64) []Hit {
	terms := Tokens(query)
	slices.Sort(terms)
	terms = slices.Compact(terms)
	if len(terms) > MaxQueryTerms {
		terms = terms[:MaxQueryTerms]
	}
	if len(terms) == 0 || n <= 0 {
		return nil
	}
	var chunks, tokens int64
	df := make([]int, len(terms))
	for _, f := range files {
		chunks += int64(len(f.Chunks))
		tokens += f.tokens
		for j, t := range terms {
			df[j] += len(f.postings[t])
		}
	}
	if chunks == 0 {
		return nil
	}
	N := float64(chunks)
	avg := max(float64(tokens)/N, 1)
	// Dense scores, one slice per file: cheaper than a map when common
	// terms touch most chunks.
	scores := make([][]float64, len(files))
	for j, t := range terms {
		idf := math.Log(1 + (N-float64(df[j])+0.5)/(float64(df[j])+0.5))
		for fi, f := range files {
			ps := f.postings[t]
			if len(ps) == 0 {
				continue
			}
			if scores[fi] == nil {
				scores[fi] = make([]float64, len(f.Chunks))
			}
			for _, p := range ps {
				tf := float64(p.tf)
				l := float64(f.Chunks[p.chunk].length)
				scores[fi][p.chunk] += idf * tf * (k1 + 1) / (tf + k1*(1-b+b*l/avg))
			}
		}
	}
	type scored struct {
		file, chunk int32
		s           float64
	}
	// The best n, kept sorted while the scores are walked in file and
	// chunk order: an equal score goes after those already kept, so ties
	// stay in that order. Cheaper than sorting every scored chunk.
	ranked := make([]scored, 0, n)
	for fi, fs := range scores {
		for ci, s := range fs {
			if s <= 0 || s < minScore || (len(ranked) == n && s <= ranked[n-1].s) {
				continue
			}
			i, _ := slices.BinarySearchFunc(ranked, s, func(r scored, s float64) int {
				if r.s >= s {
					return -1
				}
				return 1
			})
			if len(ranked) == n {
				ranked = ranked[:n-1]
			}
			ranked = slices.Insert(ranked, i, scored{int32(fi), int32(ci), s})
		}
	}
	hits := make([]Hit, len(ranked))
	for i, r := range ranked {
		hits[i] = Hit{Chunk: &files[r.file].Chunks[r.chunk], Score: r.s}
	}
	return hits
}
