package sanitize

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"

	// Image formats the sanitiser can measure and re-encode.
	_ "image/gif"
	_ "image/png"

	_ "golang.org/x/image/bmp"
	"golang.org/x/image/draw"
	_ "golang.org/x/image/tiff"
	_ "golang.org/x/image/webp"

	"github.com/lanefleet/lanefleet/ecmatext"
	"github.com/lanefleet/lanefleet/message"
)

// Image limits of the reference for images in history.
const (
	// DefaultImageMaxSide is the longest side, in pixels, an image may have.
	DefaultImageMaxSide = 1200
	// DefaultImageMaxBytes is the largest decoded size of an image (5 MiB).
	DefaultImageMaxBytes = 5 * 1024 * 1024
)

// Labels the reference puts in front of image notices.
const (
	LabelHistory = "session:history"
	LabelPrompt  = "prompt:images"
)

// ImagePrunedText replaces an image of a user turn the model has already
// answered (see PruneHistoryImages).
const ImagePrunedText = "[image data removed - already processed by model]"

// ImageLimits bounds images sent to a model. Zero fields take the defaults.
type ImageLimits struct {
	// MaxSide is the longest side in pixels (default DefaultImageMaxSide).
	MaxSide int
	// MaxBytes is the largest decoded size (default DefaultImageMaxBytes).
	MaxBytes int
}

func (l ImageLimits) withDefaults() ImageLimits {
	if l.MaxSide <= 0 {
		l.MaxSide = DefaultImageMaxSide
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultImageMaxBytes
	}
	return l
}

// jpegQualities is the quality ladder of the JPEG re-encoding.
var jpegQualities = []int{85, 75, 65, 55, 45, 35}

// ResizeGrid returns the sides and JPEG qualities the resize ladder tries, in
// order: sides [sideStart, 1800, 1600, 1400, 1200, 1000, 800] each clamped to
// maxSide, without duplicates or non-positive values, sorted descending; every
// side is tried with every quality. Because of the sort the first side can be
// larger than sideStart.
func ResizeGrid(maxSide, sideStart int) (sides, qualities []int) {
	for _, s := range []int{sideStart, 1800, 1600, 1400, 1200, 1000, 800} {
		s = min(s, maxSide)
		if s > 0 && !slices.Contains(sides, s) {
			sides = append(sides, s)
		}
	}
	slices.Sort(sides)
	slices.Reverse(sides)
	return sides, slices.Clone(jpegQualities)
}

// CanonicalBase64 returns s without white space when it is standard padded
// base64 (non-empty, a multiple of four long, [A-Za-z0-9+/] with at most two
// trailing '='), and false otherwise. URL-safe base64 is rejected.
func CanonicalBase64(s string) (string, bool) {
	if strings.IndexFunc(s, ecmatext.IsSpace) >= 0 {
		s = strings.Map(func(r rune) rune {
			if ecmatext.IsSpace(r) {
				return -1
			}
			return r
		}, s)
	}
	if s == "" || len(s)%4 != 0 {
		return "", false
	}
	body := strings.TrimRight(s, "=")
	if len(s)-len(body) > 2 || body == "" {
		return "", false
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		if !isAlnum(c) && c != '+' && c != '/' {
			return "", false
		}
	}
	return s, true
}

// InferImageMime returns the MIME type the start of base64 data shows (JPEG,
// PNG or GIF), or declared when it shows none of them.
func InferImageMime(b64, declared string) string {
	switch {
	case strings.HasPrefix(b64, "/9j/"):
		return "image/jpeg"
	case strings.HasPrefix(b64, "iVBOR"):
		return "image/png"
	case strings.HasPrefix(b64, "R0lGOD"):
		return "image/gif"
	}
	return declared
}

// ImageInfo is what is known about an image before deciding what to do.
type ImageInfo struct {
	// Width and Height in pixels; both zero when they could not be read.
	Width, Height int
	// Bytes is the decoded size.
	Bytes int
	// DeclaredMime is the block's MIME type.
	DeclaredMime string
	// Base64 is the canonical data, or at least its first characters.
	Base64 string
}

// Image actions.
const (
	ActionKeep         = "keep"
	ActionResizeToJPEG = "resizeToJpeg"
)

// ImagePlan is what SanitizeImageBlocks will do with one image.
type ImagePlan struct {
	// Action is ActionKeep or ActionResizeToJPEG.
	Action string
	// Mime is the MIME type of the result.
	Mime string
	// Sides and Qualities are the resize ladder (ActionResizeToJPEG only).
	Sides, Qualities []int
}

// PlanImage decides whether an image can be kept as it is (dimensions known,
// within both limits) or must go down the JPEG resize ladder.
func PlanImage(info ImageInfo, lim ImageLimits) ImagePlan {
	lim = lim.withDefaults()
	known := info.Width > 0 && info.Height > 0
	if known && info.Bytes <= lim.MaxBytes && info.Width <= lim.MaxSide && info.Height <= lim.MaxSide {
		return ImagePlan{Action: ActionKeep, Mime: InferImageMime(info.Base64, info.DeclaredMime)}
	}
	start := lim.MaxSide
	if known {
		start = min(lim.MaxSide, max(info.Width, info.Height))
	}
	sides, qs := ResizeGrid(lim.MaxSide, start)
	return ImagePlan{Action: ActionResizeToJPEG, Mime: "image/jpeg", Sides: sides, Qualities: qs}
}

// MaxImagePixels bounds the pixels of an image the sanitiser decodes, so
// that a small file declaring huge dimensions cannot exhaust memory. (The
// reference's image library stops at 0x3FFF², which needs a gigabyte.)
const MaxImagePixels = 50_000_000

// errPixelLimit is the reference's (sharp's) text for too many pixels.
//
//lint:ignore ST1005 the reference's text, shown to users
var errPixelLimit = errors.New("Input image exceeds pixel limit")

// errUnsupportedImage is the reference's (sharp's) text for data that is no
// image it knows.
//
//lint:ignore ST1005 the reference's text, shown to users
var errUnsupportedImage = errors.New("Input buffer contains unsupported image format")

// SanitizeImageBlocks checks every image block of blocks: empty or invalid
// base64 data and images that cannot be brought within lim are replaced by a
// text block "[<label>] omitted …"; an image too large in bytes or pixels is
// re-encoded as JPEG down the ladder of ResizeGrid; a kept image gets its
// canonical data and the MIME type its bytes show. Other blocks pass through.
// It reports whether anything changed; blocks is not modified.
func SanitizeImageBlocks(blocks []message.Block, label string, lim ImageLimits) ([]message.Block, bool) {
	lim = lim.withDefaults()
	var out []message.Block
	for i := range blocks {
		b := &blocks[i]
		if b.Type != message.BlockImage {
			continue
		}
		nb, changed := sanitizeImage(b, label, lim)
		if !changed {
			continue
		}
		if out == nil {
			out = copyBlocks(blocks)
		}
		out[i] = nb
	}
	if out == nil {
		return blocks, false
	}
	return out, true
}

func sanitizeImage(b *message.Block, label string, lim ImageLimits) (message.Block, bool) {
	if ecmatext.Trim(b.Data) == "" {
		return message.Text(fmt.Sprintf("[%s] omitted empty image payload", label)), true
	}
	data, ok := CanonicalBase64(b.Data)
	if !ok {
		return message.Text(fmt.Sprintf("[%s] omitted image payload: invalid base64", label)), true
	}
	info := ImageInfo{Bytes: base64.StdEncoding.DecodedLen(len(data)) - strings.Count(data[len(data)-2:], "="), DeclaredMime: b.MimeType, Base64: data}
	if cfg, _, err := image.DecodeConfig(base64.NewDecoder(base64.StdEncoding, strings.NewReader(data))); err == nil {
		info.Width, info.Height = cfg.Width, cfg.Height
	}
	plan := PlanImage(info, lim)
	if plan.Action == ActionKeep {
		if data == b.Data && plan.Mime == b.MimeType {
			return *b, false
		}
		nb := *b
		nb.Data, nb.MimeType = data, plan.Mime
		return nb, true
	}
	if info.Width*info.Height > MaxImagePixels {
		return message.Text(fmt.Sprintf("[%s] omitted image payload: Error: %s", label, errPixelLimit)), true
	}
	jpg, err := resizeToJPEG(data, plan, lim.MaxBytes)
	if err != nil {
		return message.Text(fmt.Sprintf("[%s] omitted image payload: Error: %s", label, err.Error())), true
	}
	nb := *b
	nb.Data, nb.MimeType = base64.StdEncoding.EncodeToString(jpg), "image/jpeg"
	return nb, true
}

// resizeToJPEG walks the ladder and returns the first JPEG within maxBytes.
func resizeToJPEG(data string, plan ImagePlan, maxBytes int) ([]byte, error) {
	raw, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return nil, fmt.Errorf("decode base64: %w", err)
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(raw))
	if err != nil {
		if errors.Is(err, image.ErrFormat) {
			return nil, errUnsupportedImage
		}
		return nil, err
	}
	if cfg.Width <= 0 || cfg.Height <= 0 || cfg.Width*cfg.Height > MaxImagePixels {
		return nil, errPixelLimit
	}
	src, _, err := image.Decode(bytes.NewReader(raw))
	if err != nil {
		if errors.Is(err, image.ErrFormat) {
			return nil, errUnsupportedImage
		}
		return nil, err
	}
	smallest := -1
	var buf bytes.Buffer
	for _, side := range plan.Sides {
		img := fitInside(src, side)
		for _, q := range plan.Qualities {
			buf.Reset()
			if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: q}); err != nil {
				return nil, fmt.Errorf("encode jpeg: %w", err)
			}
			if buf.Len() <= maxBytes {
				return bytes.Clone(buf.Bytes()), nil
			}
			if smallest < 0 || buf.Len() < smallest {
				smallest = buf.Len()
			}
		}
	}
	const mb = 1024 * 1024
	//lint:ignore ST1005 the reference's text, shown to users
	return nil, fmt.Errorf("Image could not be reduced below %sMB (got %sMB)", toFixed(float64(maxBytes)/mb, 0), toFixed(float64(smallest)/mb, 2))
}

// toFixed formats x ≥ 0 with digits decimals as JavaScript's
// Number.prototype.toFixed does, which the reference's texts use: the
// nearest decimal to x's exact value, and a tie rounds up (Go's %f rounds
// a tie to even: 2.5 → "2" where JavaScript writes "3").
func toFixed(x float64, digits int) string {
	s := strconv.FormatFloat(x, 'f', digits, 64)
	scaled := new(big.Float).SetPrec(256).SetFloat64(x)
	scaled.Mul(scaled, new(big.Float).SetPrec(256).SetFloat64(math.Pow10(digits)))
	whole, _ := scaled.Int(nil)
	frac := new(big.Float).SetPrec(256).Sub(scaled, new(big.Float).SetPrec(256).SetInt(whole))
	if frac.Cmp(big.NewFloat(0.5)) != 0 {
		return s
	}
	// An exact tie: one more unit in the last place than the lower value.
	whole.Add(whole, big.NewInt(1))
	up := whole.String()
	if digits == 0 {
		return up
	}
	for len(up) <= digits {
		up = "0" + up
	}
	return up[:len(up)-digits] + "." + up[len(up)-digits:]
}

// fitInside scales img down (never up) so that both sides are ≤ side.
func fitInside(img image.Image, side int) image.Image {
	r := img.Bounds()
	w, h := r.Dx(), r.Dy()
	if w <= side && h <= side {
		return img
	}
	nw, nh := side, side
	if w >= h {
		nh = max(1, int(float64(h)*float64(side)/float64(w)+0.5))
	} else {
		nw = max(1, int(float64(w)*float64(side)/float64(h)+0.5))
	}
	dst := image.NewRGBA(image.Rect(0, 0, nw, nh))
	draw.CatmullRom.Scale(dst, dst.Bounds(), img, r, draw.Src, nil)
	return dst
}

// PruneHistoryImages replaces every image block of user messages (with block
// content) that come before the last assistant message by a text block
// ImagePrunedText: the model has already seen them. msgs is not modified;
// when nothing changes msgs itself is returned.
func PruneHistoryImages(msgs []message.Message) ([]message.Message, bool) {
	lastAssistant := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == message.RoleAssistant {
			lastAssistant = i
			break
		}
	}
	var out []message.Message
	for i := 0; i < lastAssistant; i++ {
		m := &msgs[i]
		if m.Role != message.RoleUser || m.Content.IsPlain() {
			continue
		}
		var blocks []message.Block
		for j := range m.Content.Blocks {
			if m.Content.Blocks[j].Type != message.BlockImage {
				continue
			}
			if blocks == nil {
				blocks = copyBlocks(m.Content.Blocks)
			}
			blocks[j] = message.Text(ImagePrunedText)
		}
		if blocks == nil {
			continue
		}
		if out == nil {
			out = slices.Clone(msgs)
		}
		out[i].Content.Blocks = blocks
	}
	if out == nil {
		return msgs, false
	}
	return out, true
}
