// Command ocitar writes an OCI image layout, as a tar file, holding one static binary at
// the image's root and nothing else (the image is FROM scratch): one uncompressed layer,
// a config naming the entrypoint, a manifest, and an index whose annotations give the
// image's name, which `ctr images import` takes. tools/kube/build.sh makes the pause
// image with it (docs/kubernetes.md).
//
//	ocitar -binary bin/pause -name registry.k8s.io/pause:3.10.1 -entrypoint /pause -o pause.tar
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path"
	"runtime"
	"time"
)

func main() {
	binary := flag.String("binary", "", "the static binary to put at the image's root")
	name := flag.String("name", "", "the image's name, REPOSITORY:TAG")
	entry := flag.String("entrypoint", "", "the entrypoint, an absolute path (default /BASENAME)")
	out := flag.String("o", "", "the tar file to write")
	flag.Parse()
	if *binary == "" || *name == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: ocitar -binary FILE -name REPOSITORY:TAG [-entrypoint /PATH] -o FILE.tar")
		os.Exit(2)
	}
	if err := run(*binary, *name, *entry, *out); err != nil {
		fmt.Fprintln(os.Stderr, "ocitar:", err)
		os.Exit(1)
	}
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int               `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    map[string]string `json:"platform,omitempty"`
}

func describe(mediaType string, b []byte) descriptor {
	sum := sha256.Sum256(b)
	return descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: len(b)}
}

func run(binary, name, entry, out string) error {
	exe, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	base := path.Base(binary)
	if entry == "" {
		entry = "/" + base
	}
	epoch := time.Unix(0, 0).UTC()

	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	if err := lw.WriteHeader(&tar.Header{Name: path.Base(entry), Mode: 0o755, Size: int64(len(exe)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := lw.Write(exe); err != nil {
		return err
	}
	if err := lw.Close(); err != nil {
		return err
	}
	layerDesc := describe("application/vnd.oci.image.layer.v1.tar", layer.Bytes())

	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config":       map[string]any{"Entrypoint": []string{entry}, "User": "65535:65535"},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
	})
	if err != nil {
		return err
	}
	configDesc := describe("application/vnd.oci.image.config.v1+json", config)

	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        configDesc,
		"layers":        []descriptor{layerDesc},
	})
	if err != nil {
		return err
	}
	manifestDesc := describe("application/vnd.oci.image.manifest.v1+json", manifest)
	manifestDesc.Platform = map[string]string{"architecture": runtime.GOARCH, "os": "linux"}
	manifestDesc.Annotations = map[string]string{
		"io.containerd.image.name":          name,
		"org.opencontainers.image.ref.name": name,
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []descriptor{manifestDesc},
	})
	if err != nil {
		return err
	}

	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"blobs/sha256/" + layerDesc.Digest[7:], layer.Bytes()},
		{"blobs/sha256/" + configDesc.Digest[7:], config},
		{"blobs/sha256/" + manifestDesc.Digest[7:], manifest},
		{"index.json", index},
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Mode: 0o755, ModTime: epoch, Typeflag: tar.TypeDir}); err != nil {
			f.Close()
			return err
		}
	}
	for _, e := range files {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			f.Close()
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			f.Close()
			return err
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
