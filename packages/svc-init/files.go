package main

// The agent's files: svcd's files API (GET/PUT/DELETE /v1/environments/{id}/files) reads and
// writes through here, inside the environment's own filesystem and as its user, so the agent can
// reach nothing a command run by exec could not. A path is absolute and cleaned by svcd; links
// are followed as any program in the environment would follow them (they cannot lead out of it).
// What is read must be a regular file: a FIFO or a device would never end or never answer.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A directory lists at most this many entries (sorted by name), and at most about this much of
// them, with truncated set past either: names and link targets can be long, and svcd holds the
// answer whole.
const (
	maxListEntries = 10_000
	maxListBytes   = 2 << 20
)

// An upload whose body stops coming is given up after this long.
const uploadDeadline = 10 * time.Minute

type fileInfo struct {
	Path       string `json:"path"`
	Name       string `json:"name"`
	Type       string `json:"type"`
	Size       int64  `json:"size"`
	Mode       string `json:"mode"`
	ModifiedAt int64  `json:"modified_at"`
	LinkTarget string `json:"link_target,omitempty"`
}

type fileList struct {
	Path      string     `json:"path"`
	Entries   []fileInfo `json:"entries"`
	Truncated bool       `json:"truncated"`
}

func infoOf(path string, st fs.FileInfo) fileInfo {
	kind := "other"
	switch {
	case st.Mode().IsRegular():
		kind = "file"
	case st.IsDir():
		kind = "directory"
	case st.Mode()&fs.ModeSymlink != 0:
		kind = "symlink"
	}
	info := fileInfo{
		Path:       path,
		Name:       filepath.Base(path),
		Type:       kind,
		Size:       st.Size(),
		Mode:       "0" + strconv.FormatUint(uint64(st.Mode().Perm()), 8),
		ModifiedAt: st.ModTime().Unix(),
	}
	// A time before 1970 (touch -d 1960-01-01) is said as 0: the API's times are unsigned.
	if info.ModifiedAt < 0 {
		info.ModifiedAt = 0
	}
	if kind == "symlink" {
		info.LinkTarget, _ = os.Readlink(path)
	}
	return info
}

func serveFiles(w http.ResponseWriter, r *http.Request) {
	query := r.URL.Query()
	path := query.Get("path")
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "path must be absolute and clean"})
		return
	}
	maxBytes, _ := strconv.ParseInt(query.Get("max_bytes"), 10, 64)
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/files/stat":
		st, err := os.Lstat(path)
		if err != nil {
			fileError(w, path, err)
			return
		}
		writeJSON(w, http.StatusOK, infoOf(path, st))
	case r.Method == http.MethodGet && r.URL.Path == "/files/list":
		listDir(w, path)
	case r.Method == http.MethodGet && r.URL.Path == "/files/content":
		readFile(w, path, maxBytes)
	case r.Method == http.MethodPut && r.URL.Path == "/files/content":
		mode, err := strconv.ParseUint(query.Get("mode"), 8, 32)
		if err != nil || mode > 0o7777 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "mode must be octal permissions (0644)"})
			return
		}
		if c := connOf(r); c != nil {
			_ = c.SetReadDeadline(time.Now().Add(uploadDeadline))
		}
		writeFile(w, r.Body, path, os.FileMode(mode), maxBytes)
	case r.Method == http.MethodDelete && r.URL.Path == "/files":
		removePath(w, path, query.Get("recursive") == "true")
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "not found"})
	}
}

// fileError answers an error of the filesystem with the status svcd maps on: 404 for what is not
// there, 400 for anything else the caller asked wrongly (a file where a directory is needed...).
func fileError(w http.ResponseWriter, path string, err error) {
	var errno syscall.Errno
	switch {
	case errors.Is(err, fs.ErrNotExist):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such file or directory: " + path})
	case errors.Is(err, fs.ErrPermission):
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "permission denied: " + path})
	case errors.As(err, &errno):
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": path + ": " + errno.Error()})
	default:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": path + ": " + err.Error()})
	}
}

func listDir(w http.ResponseWriter, path string) {
	// O_NONBLOCK and O_DIRECTORY: a FIFO is not waited on (for a writer that may never come), it is not a directory.
	dir, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_DIRECTORY, 0)
	if err != nil {
		fileError(w, path, err)
		return
	}
	defer dir.Close()
	// Read one past the cap: a directory of a million entries costs the agent the cap, not the million.
	entries, err := dir.ReadDir(maxListEntries + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		fileError(w, path, err)
		return
	}
	list := fileList{Path: path, Entries: []fileInfo{}}
	if len(entries) > maxListEntries {
		entries, list.Truncated = entries[:maxListEntries], true
	}
	size := 0
	for _, e := range entries {
		st, err := e.Info()
		if err != nil {
			continue // gone since it was listed
		}
		info := infoOf(filepath.Join(path, e.Name()), st)
		// The entry's JSON: its strings and about 100 bytes of the rest.
		size += len(info.Path) + len(info.Name) + len(info.LinkTarget) + 100
		if size > maxListBytes {
			list.Truncated = true
			break
		}
		list.Entries = append(list.Entries, info)
	}
	// Read this way (with a cap) the entries come in the directory's order, not sorted.
	sort.Slice(list.Entries, func(i, j int) bool { return list.Entries[i].Name < list.Entries[j].Name })
	writeJSON(w, http.StatusOK, list)
}

func readFile(w http.ResponseWriter, path string, maxBytes int64) {
	// /proc is the processes' own view, svc-init's included: read by the agent (PID 1 itself, as
	// its own user), /proc/1/environ would be svc-init's initial environment, the agent's token in
	// it. Its files say size 0 and would read as empty here anyway; they are refused outright.
	if real, err := filepath.EvalSymlinks(path); err == nil && (real == "/proc" || strings.HasPrefix(real, "/proc/")) {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": path + " is under /proc, which the files API does not read (exec can)"})
		return
	}
	// O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below as not a regular file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		fileError(w, path, err)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		fileError(w, path, err)
		return
	}
	if !st.Mode().IsRegular() {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": path + " is not a regular file"})
		return
	}
	if st.Size() > maxBytes {
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": path + " is larger than the files API's cap"})
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
	w.WriteHeader(http.StatusOK)
	// A file that grew since it was measured is cut at its measured size; one that shrank ends the
	// answer short, which svcd sees as an answer that did not end.
	_, _ = io.CopyN(w, f, st.Size())
}

// writeFile writes body to path through a temporary file beside it, renamed over it once whole:
// a reader never sees half a file, and an upload cut midway leaves the old one. Missing parent
// directories are created. A body past maxBytes is refused (413) and nothing is left.
func writeFile(w http.ResponseWriter, body io.Reader, path string, mode os.FileMode, maxBytes int64) {
	if path == "/" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "/ is a directory"})
		return
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": path + " is a directory"})
		return
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fileError(w, dir, err)
		return
	}
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	temporary := filepath.Join(dir, "."+filepath.Base(path)+".svc-upload-"+hex.EncodeToString(suffix))
	f, err := os.OpenFile(temporary, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		fileError(w, dir, err)
		return
	}
	n, err := io.Copy(f, io.LimitReader(body, maxBytes+1))
	closeErr := f.Close()
	switch {
	case err != nil:
		os.Remove(temporary)
		fileError(w, path, err)
		return
	case n > maxBytes:
		os.Remove(temporary)
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": "the upload is larger than the files API's cap"})
		return
	case closeErr != nil:
		os.Remove(temporary)
		fileError(w, path, closeErr)
		return
	}
	// The umask took bits off at creation; the mode asked for is the mode the file gets.
	if err := os.Chmod(temporary, mode); err != nil {
		os.Remove(temporary)
		fileError(w, path, err)
		return
	}
	if err := os.Rename(temporary, path); err != nil {
		os.Remove(temporary)
		fileError(w, path, err)
		return
	}
	st, err := os.Lstat(path)
	if err != nil {
		fileError(w, path, err)
		return
	}
	writeJSON(w, http.StatusOK, infoOf(path, st))
}

func removePath(w http.ResponseWriter, path string, recursive bool) {
	if path == "/" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "/ cannot be removed"})
		return
	}
	if _, err := os.Lstat(path); err != nil {
		fileError(w, path, err)
		return
	}
	var err error
	if recursive {
		err = os.RemoveAll(path)
	} else {
		err = os.Remove(path)
	}
	if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
		writeJSON(w, http.StatusConflict, map[string]string{"error": path + " is a directory with entries: remove it with recursive=true"})
		return
	}
	if err != nil {
		fileError(w, path, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
