//go:build e2e

package kubeharness

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

// ImageTestProgram is the image of the harness's test program: the test
// binary itself, re-executed with GORAY_KUBEHARNESS_TESTPROG=1 so that
// RunTestProgram (called first in TestMain) runs the container's args
// instead of the tests. See RunTestProgram for its commands.
const ImageTestProgram = "goray.dev/kubeharness/testprog"

// selfBinary marks the test binary in the image table.
const selfBinary = "<test binary>"

// builtinImages is the default image → binary table (see the package doc).
// "" means the image has no entrypoint: the container's command (or first
// arg) is looked up on the host PATH, as with a shell image.
var builtinImages = map[string]string{
	ImageTestProgram: selfBinary,
	"busybox":        "",
	"alpine":         "",
	"debian":         "",
	"ubuntu":         "",
}

// imageTable maps images to local binaries: Options.Images over
// builtinImages. Keys are matched exactly first, then without tag or digest
// and without a docker.io/ or docker.io/library/ prefix.
type imageTable map[string]string

func newImageTable(extra map[string]string) imageTable {
	t := make(imageTable, len(builtinImages)+len(extra))
	for k, v := range builtinImages {
		t[k] = v
	}
	for k, v := range extra {
		t[k] = v
	}
	return t
}

// repository strips the tag, digest and docker.io prefixes of an image.
func repository(image string) string {
	if i := strings.IndexByte(image, '@'); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndexByte(image, ':'); i > strings.LastIndexByte(image, '/') {
		image = image[:i]
	}
	image = strings.TrimPrefix(image, "docker.io/")
	return strings.TrimPrefix(image, "library/")
}

func (t imageTable) lookup(image string) (string, bool) {
	if b, ok := t[image]; ok {
		return b, true
	}
	b, ok := t[repository(image)]
	return b, ok
}

func (t imageTable) isTestProgram(image string) bool {
	b, ok := t.lookup(image)
	return ok && b == selfBinary
}

// resolve returns the local binary of image ("" for a PATH image), or an
// error naming the known images.
func (t imageTable) resolve(image string) (string, error) {
	b, ok := t.lookup(image)
	if !ok {
		known := make([]string, 0, len(t))
		for k := range t {
			known = append(known, k)
		}
		sort.Strings(known)
		return "", fmt.Errorf("image %q is not in the harness image table (Options.Images); known: %s",
			image, strings.Join(known, ", "))
	}
	if b == selfBinary {
		self, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("image %q: test binary: %w", image, err)
		}
		return self, nil
	}
	return b, nil
}
