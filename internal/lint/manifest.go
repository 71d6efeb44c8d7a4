package lint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// Object is one Kubernetes object read from the input, with where it came
// from. List kinds are flattened into their items.
type Object struct {
	File       string // the file name as given ("stdin" for standard input)
	Line       int    // 1-based line where the object starts; 0 when unknown
	APIVersion string
	Kind       string
	Namespace  string
	Name       string

	raw  []byte     // the object as JSON
	node *yaml.Node // the parsed YAML of the object, for line numbers; may be nil
}

// Ref returns the object's reference.
func (o *Object) Ref() ObjectRef {
	return ObjectRef{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name}
}

// Decode decodes the object into v (a typed Kubernetes object).
func (o *Object) Decode(v any) error {
	if err := json.Unmarshal(o.raw, v); err != nil {
		return fmt.Errorf("decode %s: %w", o.Ref(), err)
	}
	return nil
}

// group returns the API group of the object ("" for the core group).
func (o *Object) group() string {
	g, _, ok := strings.Cut(o.APIVersion, "/")
	if !ok {
		return ""
	}
	return g
}

// LineOf returns the line of the field at path (as in Finding.Field): the
// line of its key, or of the list item. When the path does not exist it
// returns the line of the deepest parent that does, at worst the object's.
func (o *Object) LineOf(path string) int {
	if o.node == nil {
		return o.Line
	}
	n, line := o.node, o.Line
	for _, seg := range splitPath(path) {
		n = follow(n)
		var next *yaml.Node
		switch {
		case seg.index >= 0 && n.Kind == yaml.SequenceNode && seg.index < len(n.Content):
			next = n.Content[seg.index]
			line = next.Line
		case seg.index < 0 && n.Kind == yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == seg.key {
					line, next = n.Content[i].Line, n.Content[i+1]
					break
				}
			}
		}
		if next == nil {
			break
		}
		n = next
	}
	return line
}

type pathSeg struct {
	key   string
	index int // -1 for a key
}

// splitPath splits "spec.containers[0].env[2]" into segments.
func splitPath(p string) []pathSeg {
	var out []pathSeg
	for _, part := range strings.Split(p, ".") {
		if part == "" {
			continue
		}
		key := part
		var idx []int
		for {
			i := strings.LastIndexByte(key, '[')
			if i < 0 || !strings.HasSuffix(key, "]") {
				break
			}
			n, err := strconv.Atoi(key[i+1 : len(key)-1])
			if err != nil {
				break
			}
			idx = append([]int{n}, idx...)
			key = key[:i]
		}
		if key != "" {
			out = append(out, pathSeg{key: key, index: -1})
		}
		for _, n := range idx {
			out = append(out, pathSeg{index: n})
		}
	}
	return out
}

func follow(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && i < 32; i++ {
		n = n.Alias
	}
	if n != nil && n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		return n.Content[0]
	}
	return n
}

// MaxInputSize is the largest input (file or standard input) Read accepts.
const MaxInputSize = 64 << 20

// ParseError is a problem with one input: unreadable, not YAML or JSON, or a
// document that is not an object.
type ParseError struct {
	File string
	Line int // 0 when unknown
	Err  error
}

func (e *ParseError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.File, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// Read parses one input: a stream of YAML documents, JSON values, or both.
// Documents without apiVersion and kind (values files, other YAML) are
// skipped; `List` kinds are flattened. It returns the objects it could read
// and an error joining one *ParseError per bad document.
func Read(file string, data []byte) ([]Object, error) {
	if len(data) > MaxInputSize {
		return nil, &ParseError{File: file, Err: fmt.Errorf("input larger than %d bytes", MaxInputSize)}
	}
	var objs []Object
	var errs []error
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if trimmed := bytes.TrimSpace(data); len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[') {
				// JSON that YAML cannot read (tabs, for example): read it as a JSON stream.
				return readJSON(file, data)
			}
			errs = append(errs, &ParseError{File: file, Line: yamlErrLine(err), Err: fmt.Errorf("parse YAML: %w", cleanYAMLErr(err))})
			break // the decoder cannot resynchronise after a syntax error
		}
		root := follow(&doc)
		if root == nil || (root.Kind == yaml.ScalarNode && root.Tag == "!!null") {
			continue // an empty document
		}
		var v any
		if err := root.Decode(&v); err != nil {
			errs = append(errs, &ParseError{File: file, Line: root.Line, Err: fmt.Errorf("parse YAML: %w", cleanYAMLErr(err))})
			continue
		}
		got, err := objectsFrom(file, normalize(v, 0), root)
		objs = append(objs, got...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return objs, errors.Join(errs...)
}

// readJSON reads a stream of JSON values (no line numbers).
func readJSON(file string, data []byte) ([]Object, error) {
	var objs []Object
	var errs []error
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			errs = append(errs, &ParseError{File: file, Err: fmt.Errorf("parse JSON: %w", err)})
			break
		}
		got, err := objectsFrom(file, v, nil)
		objs = append(objs, got...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return objs, errors.Join(errs...)
}

// maxDepth bounds the nesting Read accepts (deeply nested or aliased input).
const maxDepth = 200

// normalize turns YAML-decoded values into JSON-compatible ones: maps with
// non-string keys get string keys.
func normalize(v any, depth int) any {
	if depth > maxDepth {
		return nil
	}
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = normalize(e, depth+1)
		}
		return t
	case map[any]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[fmt.Sprint(k)] = normalize(e, depth+1)
		}
		return m
	case []any:
		for i, e := range t {
			t[i] = normalize(e, depth+1)
		}
		return t
	}
	return v
}

// objectsFrom turns one decoded document into objects; List kinds become
// their items.
func objectsFrom(file string, v any, node *yaml.Node) ([]Object, error) {
	line := 0
	if node != nil {
		line = node.Line
	}
	m, ok := v.(map[string]any)
	if !ok {
		if v == nil {
			return nil, nil
		}
		return nil, &ParseError{File: file, Line: line, Err: errors.New("document is not a mapping (not a Kubernetes object)")}
	}
	apiVersion, _ := m["apiVersion"].(string)
	kind, _ := m["kind"].(string)
	if apiVersion == "" || kind == "" {
		return nil, nil // not a Kubernetes object
	}
	if items, ok := m["items"].([]any); ok && (kind == "List" || strings.HasSuffix(kind, "List")) {
		var objs []Object
		var errs []error
		var itemNodes []*yaml.Node
		if node != nil {
			itemNodes = childSeq(node, "items")
		}
		for i, it := range items {
			var in *yaml.Node
			if i < len(itemNodes) {
				in = itemNodes[i]
			}
			got, err := objectsFrom(file, it, in)
			objs = append(objs, got...)
			if err != nil {
				errs = append(errs, err)
			}
		}
		return objs, errors.Join(errs...)
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, &ParseError{File: file, Line: line, Err: fmt.Errorf("convert %s to JSON: %w", kind, err)}
	}
	meta, _ := m["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	ns, _ := meta["namespace"].(string)
	o := Object{File: file, Line: line, APIVersion: apiVersion, Kind: kind, Namespace: ns, Name: name, raw: raw, node: node}
	if node != nil && node.Kind == yaml.MappingNode && len(node.Content) > 0 {
		o.Line = node.Content[0].Line
	}
	return []Object{o}, nil
}

// childSeq returns the items of the sequence under key in mapping n.
func childSeq(n *yaml.Node, key string) []*yaml.Node {
	n = follow(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			if s := follow(n.Content[i+1]); s != nil && s.Kind == yaml.SequenceNode {
				out := make([]*yaml.Node, len(s.Content))
				for j, c := range s.Content {
					out[j] = follow(c)
				}
				return out
			}
		}
	}
	return nil
}

// yamlErrLine extracts "line N" from a YAML error message.
func yamlErrLine(err error) int {
	s := err.Error()
	i := strings.Index(s, "line ")
	if i < 0 {
		return 0
	}
	n, _ := leadingNumber(s[i+5:])
	return n
}

// cleanYAMLErr drops the "yaml: " prefix of go-yaml errors.
func cleanYAMLErr(err error) error {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	return errors.New(s)
}

// ReadPaths reads files, directories (recursively: *.yaml, *.yml, *.json,
// skipping hidden directories) and "-" (stdin) in order. It returns every
// object it could read and an error joining the problems.
func ReadPaths(paths []string, stdin io.Reader) ([]Object, error) {
	var objs []Object
	var errs []error
	readOne := func(name string, r io.Reader) {
		data, err := io.ReadAll(io.LimitReader(r, MaxInputSize+1))
		if err != nil {
			errs = append(errs, &ParseError{File: name, Err: fmt.Errorf("read: %w", err)})
			return
		}
		got, err := Read(name, data)
		objs = append(objs, got...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	readFile := func(name string) {
		f, err := os.Open(name)
		if err != nil {
			errs = append(errs, &ParseError{File: name, Err: pathErr(err)})
			return
		}
		defer f.Close()
		readOne(name, f)
	}
	for _, p := range paths {
		if p == "-" {
			if stdin == nil {
				stdin = strings.NewReader("")
			}
			readOne("stdin", stdin)
			continue
		}
		st, err := os.Stat(p)
		if err != nil {
			errs = append(errs, &ParseError{File: p, Err: pathErr(err)})
			continue
		}
		if !st.IsDir() {
			readFile(p)
			continue
		}
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				errs = append(errs, &ParseError{File: path, Err: pathErr(err)})
				return nil
			}
			if d.IsDir() {
				if path != p && strings.HasPrefix(d.Name(), ".") {
					return filepath.SkipDir
				}
				return nil
			}
			switch strings.ToLower(filepath.Ext(path)) {
			case ".yaml", ".yml", ".json":
				readFile(path)
			}
			return nil
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	return objs, errors.Join(errs...)
}

// pathErr drops the path from an *fs.PathError (ParseError names the file).
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}
