package sanitize

import (
	"bytes"
	"encoding/base64"
	"image"
	"reflect"
	"regexp"
	"testing"

	"github.com/lanefleet/lanefleet/message"
)

// TestPlanImageLimits: the keep-or-resize decision and the ladder at and
// around the limits, default and configured (runtime spec §10.1).
func TestPlanImageLimits(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	tests := []struct {
		name   string
		info   ImageInfo
		lim    ImageLimits
		action string
		sides  []int
	}{
		{"exactly the side and byte limits: kept", ImageInfo{Width: 1200, Height: 1200, Bytes: 5 * mib}, ImageLimits{}, ActionKeep, nil},
		{"one pixel over the side: resized from the limit", ImageInfo{Width: 1201, Height: 10, Bytes: 100}, ImageLimits{}, ActionResizeToJPEG, []int{1200, 1000, 800}},
		{"a tall image: its height counts", ImageInfo{Width: 10, Height: 2400, Bytes: 100}, ImageLimits{}, ActionResizeToJPEG, []int{1200, 1000, 800}},
		{"one byte over: resized, starting above its own side", ImageInfo{Width: 900, Height: 700, Bytes: 5*mib + 1}, ImageLimits{}, ActionResizeToJPEG, []int{1200, 1000, 900, 800}},
		{"small and heavy: no rung below 800 is added", ImageInfo{Width: 300, Height: 200, Bytes: 6 * mib}, ImageLimits{}, ActionResizeToJPEG, []int{1200, 1000, 800, 300}},
		{"unknown dimensions always go down the ladder", ImageInfo{Bytes: 10}, ImageLimits{}, ActionResizeToJPEG, []int{1200, 1000, 800}},
		{"one side unknown counts as unknown", ImageInfo{Width: 100, Bytes: 10}, ImageLimits{}, ActionResizeToJPEG, []int{1200, 1000, 800}},
		{"a larger configured side", ImageInfo{Width: 3000, Height: 1000, Bytes: 100}, ImageLimits{MaxSide: 2000}, ActionResizeToJPEG, []int{2000, 1800, 1600, 1400, 1200, 1000, 800}},
		{"a configured side below every rung", ImageInfo{Width: 3000, Height: 1000, Bytes: 100}, ImageLimits{MaxSide: 500}, ActionResizeToJPEG, []int{500}},
		{"a configured byte limit", ImageInfo{Width: 100, Height: 100, Bytes: 2 * mib}, ImageLimits{MaxBytes: mib}, ActionResizeToJPEG, []int{1200, 1000, 800, 100}},
		{"non-positive limits take the defaults", ImageInfo{Width: 1200, Height: 1200, Bytes: 5 * mib}, ImageLimits{MaxSide: -1, MaxBytes: 0}, ActionKeep, nil},
	}
	for _, tt := range tests {
		p := PlanImage(tt.info, tt.lim)
		if p.Action != tt.action || !reflect.DeepEqual(p.Sides, tt.sides) {
			t.Errorf("%s: %s %v, want %s %v", tt.name, p.Action, p.Sides, tt.action, tt.sides)
			continue
		}
		if p.Action == ActionResizeToJPEG && (p.Mime != "image/jpeg" || !reflect.DeepEqual(p.Qualities, []int{85, 75, 65, 55, 45, 35})) {
			t.Errorf("%s: plan %+v", tt.name, p)
		}
	}
}

// TestImageResizeEncodes: re-encoded images are JPEGs that fit the side
// limit with their aspect kept, never enlarged; an image already within
// the limits keeps its bytes.
func TestImageResizeEncodes(t *testing.T) {
	t.Parallel()
	size := func(t *testing.T, b message.Block) (int, int, string) {
		t.Helper()
		raw, err := base64.StdEncoding.DecodeString(b.Data)
		if err != nil {
			t.Fatal(err)
		}
		cfg, format, err := image.DecodeConfig(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Width, cfg.Height, format
	}
	tests := []struct {
		name       string
		w, h       int
		lim        ImageLimits
		wantW      int
		wantH      int
		wantFormat string
	}{
		{"at the limit: kept as it is", 1200, 30, ImageLimits{}, 1200, 30, "png"},
		{"one pixel over: scaled to the limit", 1201, 30, ImageLimits{}, 1200, 30, "jpeg"},
		{"tall: scaled by its height", 20, 2400, ImageLimits{}, 10, 1200, "jpeg"},
		{"a configured side", 400, 200, ImageLimits{MaxSide: 100}, 100, 50, "jpeg"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data := pngData(t, tt.w, tt.h, false)
			out, _ := SanitizeImageBlocks([]message.Block{message.Image("image/png", data)}, LabelHistory, tt.lim)
			if out[0].Type != message.BlockImage {
				t.Fatalf("got text %q", out[0].Text)
			}
			w, h, f := size(t, out[0])
			if w != tt.wantW || h != tt.wantH || f != tt.wantFormat || (f == "jpeg") != (out[0].MimeType == "image/jpeg") {
				t.Fatalf("%dx%d %s (%s), want %dx%d %s", w, h, f, out[0].MimeType, tt.wantW, tt.wantH, tt.wantFormat)
			}
			if f == "png" && out[0].Data != data {
				t.Fatal("a kept image was re-encoded")
			}
		})
	}
}

// TestImageTooLargeText: an image no rung of the ladder brings under the
// byte limit becomes the reference's text, numbers formatted as
// JavaScript's toFixed formats them.
func TestImageTooLargeText(t *testing.T) {
	t.Parallel()
	noisy := pngData(t, 200, 200, true)
	out, _ := SanitizeImageBlocks([]message.Block{message.Image("image/png", noisy)}, "prompt:images", ImageLimits{MaxBytes: 3 << 19}) // 1.5 MiB
	if out[0].Type != message.BlockImage {
		t.Fatalf("a 200 px image did not fit 1.5 MiB: %q", out[0].Text)
	}
	out, _ = SanitizeImageBlocks([]message.Block{message.Image("image/png", noisy)}, "prompt:images", ImageLimits{MaxBytes: 512})
	re := regexp.MustCompile(`^\[prompt:images\] omitted image payload: Error: Image could not be reduced below 0MB \(got 0\.\d\dMB\)$`)
	if out[0].Type != message.BlockText || !re.MatchString(out[0].Text) {
		t.Fatalf("got %+v", out[0])
	}
}

func TestToFixed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		x      float64
		digits int
		want   string
	}{
		{5, 0, "5"},
		{2.5, 0, "3"}, // a tie rounds up (Go's %.0f gives "2")
		{0.5, 0, "1"},
		{1.4999, 0, "1"},
		{0.125, 2, "0.13"}, // exact tie
		{1.005, 2, "1.00"}, // not a tie: 1.005 is 1.00499999… in binary
		{0.00048828125, 2, "0.00"},
		{0.005, 2, "0.01"}, // 0.005 is 0.005000000000000000104… in binary
		{12.3456, 2, "12.35"},
		{0, 2, "0.00"},
		{0.0625, 3, "0.063"},
	}
	for _, tt := range tests {
		if got := toFixed(tt.x, tt.digits); got != tt.want {
			t.Errorf("toFixed(%v, %d) = %q, want %q", tt.x, tt.digits, got, tt.want)
		}
	}
}
