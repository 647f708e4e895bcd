package kinds

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/leasehold/leasehold/internal/jsonkeys"
	"github.com/leasehold/leasehold/model"
)

// Bounds of a kinds file.
const (
	FileBytesMax    = 1 << 20             // a whole kinds file
	KindsMax        = 256                 // kinds in one file
	KindNameMax     = model.KindLengthMax // bytes of a kind's name
	ArgsMax         = 64                  // arguments of one command
	ArgBytesMax     = 4096                // bytes of one argument
	AttemptsMaxMost = 1000                // a default attempts_max
	TimeoutMost     = 24 * time.Hour      // a default step timeout
	GraceMost       = time.Hour           // a command's SIGTERM-to-SIGKILL grace
	GraceDefault    = 10 * time.Second    // the grace when a kind names none
)

// Synthetic is the built-in kind of the synthetic payload; a kinds file
// may not define it.
const Synthetic = "synthetic"

// ErrInvalidFile: a kinds file was refused. The error wrapping it names
// the path of what is wrong.
var ErrInvalidFile = errors.New("invalid kinds file")

// ErrUnknownKind: the kind named is not in the file.
var ErrUnknownKind = errors.New("kind not in the kinds file")

// ServiceKind says what a command's side effects let the worker do when a
// run's outcome is unknown (an intent recorded, no receipt): the same
// kinds as the worker's services (worker.ServiceKind).
type ServiceKind string

// The service kinds a command may have.
const (
	// ServiceDedup: the command hands the operation ID to a service that
	// applies each ID at most once, so running it again is safe.
	ServiceDedup ServiceKind = "dedup"
	// ServiceQueryable: the kind's reconcile command answers, for an
	// operation ID, whether it was applied.
	ServiceQueryable ServiceKind = "queryable"
	// ServiceFenced: as queryable, and the service the command calls
	// refuses an operation under a fence lower than one it has seen for
	// it; asking (the reconcile command, given LEASEHOLD_FENCE) registers
	// the asker's fence.
	ServiceFenced ServiceKind = "fenced"
	// ServiceNone: neither; an unknown outcome goes to an operator.
	ServiceNone ServiceKind = "none"
)

// ServiceKinds lists the service kinds a kinds file may name.
func ServiceKinds() []ServiceKind {
	return []ServiceKind{ServiceDedup, ServiceQueryable, ServiceFenced, ServiceNone}
}

// File is a parsed kinds file. It is immutable and safe for concurrent
// use.
type File struct {
	kinds map[string]*Kind
	names []string // sorted
}

// Kind is one kind of a kinds file.
type Kind struct {
	Name string
	// Schema is the kind's JSON Schema as the file wrote it; nil when the
	// kind has none (any JSON object is a payload of it).
	Schema   json.RawMessage
	Defaults Defaults
	// Worker is how a worker runs the kind; nil when the file says
	// nothing of it.
	Worker *Worker

	compiled *jsonschema.Schema
}

// Defaults are what a task of the kind takes where its request names
// nothing; zero means the file gives no default.
type Defaults struct {
	Lease       time.Duration // the worker's lease on a claim of the kind
	AttemptsMax int
	CostBudget  int64 // "budget"
	StepsMax    int
	Timeout     time.Duration // a step's timeout
}

// Worker is how a worker runs a kind: a command, once per step.
type Worker struct {
	Command []string
	// Dir is the commands' working directory, absolute.
	Dir     string
	Service ServiceKind
	// Reconcile is the command that answers whether an operation was
	// applied: set for ServiceQueryable and ServiceFenced, nil otherwise.
	Reconcile []string
	// Grace is how long a command has between SIGTERM and SIGKILL.
	Grace time.Duration
}

// Request returns the defaults intake applies to a request of the kind:
// the cost budget and step limit where the request names none. The
// others are the worker's (Lease, Timeout) or wait (AttemptsMax: the
// queue's limits hold one attempts_max for every task).
func (d Defaults) Request() model.RequestDefaults {
	return model.RequestDefaults{CostBudget: d.CostBudget, StepsMax: d.StepsMax}
}

// RequestDefaults returns, by kind, the defaults intake applies
// (Defaults.Request) for each kind that gives a budget or a step limit:
// queue.Options.Defaults.
func (f *File) RequestDefaults() map[string]model.RequestDefaults {
	out := map[string]model.RequestDefaults{}
	for _, name := range f.names {
		if d := f.kinds[name].Defaults.Request(); d != (model.RequestDefaults{}) {
			out[name] = d
		}
	}
	return out
}

// Names returns the file's kinds, sorted.
func (f *File) Names() []string { return slices.Clone(f.names) }

// Kind returns the kind named name.
func (f *File) Kind(name string) (*Kind, bool) {
	k, ok := f.kinds[name]
	return k, ok
}

// Load reads and parses the kinds file at path.
func Load(path string) (*File, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("kinds file %s: %w", path, err)
	}
	fh, err := os.Open(abs)
	if err != nil {
		return nil, fmt.Errorf("kinds file: %w", err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, FileBytesMax+1))
	if err != nil {
		return nil, fmt.Errorf("kinds file %s: %w", path, err)
	}
	f, err := Parse(data, filepath.Dir(abs))
	if err != nil {
		return nil, fmt.Errorf("kinds file %s: %w", path, err)
	}
	return f, nil
}

// Parse parses a kinds file's contents; dir is the directory a relative
// "dir" is taken from, and the commands' working directory by default
// (made absolute).
func Parse(data []byte, dir string) (*File, error) {
	if len(data) > FileBytesMax {
		return nil, invalidFile("", fmt.Sprintf("larger than %d bytes", FileBytesMax))
	}
	if err := jsonkeys.Check(data); err != nil {
		var dup *jsonkeys.DuplicateError
		if errors.As(err, &dup) {
			return nil, invalidFile(dup.Path, "the key appears twice in one object")
		}
		return nil, fmt.Errorf("%w: not well-formed JSON", ErrInvalidFile)
	}
	base, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("kinds file directory: %w", err)
	}
	var top struct {
		Kinds map[string]json.RawMessage `json:"kinds"`
	}
	if err := strict(data, &top); err != nil {
		return nil, invalidFile("", err.Error())
	}
	if top.Kinds == nil {
		return nil, invalidFile("kinds", "required: an object of kinds by name")
	}
	if len(top.Kinds) > KindsMax {
		return nil, invalidFile("kinds", fmt.Sprintf("%d kinds (limit %d)", len(top.Kinds), KindsMax))
	}
	f := &File{kinds: map[string]*Kind{}}
	for name := range top.Kinds {
		f.names = append(f.names, name)
	}
	slices.Sort(f.names)
	for _, name := range f.names {
		at := "kinds." + name
		if err := CheckName(name); err != nil {
			return nil, invalidFile("kinds", fmt.Sprintf("kind name %q: %v", clip(name), err))
		}
		k, err := parseKind(at, name, top.Kinds[name], base)
		if err != nil {
			return nil, err
		}
		f.kinds[name] = k
	}
	return f, nil
}

// CheckName validates a kind's name in a kinds file: model.CheckKind's
// rule (the one every request's kind is held to: 1 to
// model.KindLengthMax bytes of lower-case letters, digits and ._-, a
// letter first), and not Synthetic, which is built in.
func CheckName(name string) error {
	if err := model.CheckKind("kind", name); err != nil {
		return err
	}
	if name == Synthetic {
		return fmt.Errorf("%s is built in", Synthetic)
	}
	return nil
}

type kindJSON struct {
	Schema   json.RawMessage `json:"schema"`
	Defaults json.RawMessage `json:"defaults"`
	Worker   json.RawMessage `json:"worker"`
}

type defaultsJSON struct {
	Lease       string `json:"lease"`
	AttemptsMax *int   `json:"attempts_max"`
	Budget      *int64 `json:"budget"`
	StepsMax    *int   `json:"steps_max"`
	Timeout     string `json:"timeout"`
}

type workerJSON struct {
	Command   []string `json:"command"`
	Dir       string   `json:"dir"`
	Service   string   `json:"service"`
	Reconcile []string `json:"reconcile"`
	Grace     string   `json:"grace"`
}

func parseKind(at, name string, raw json.RawMessage, base string) (*Kind, error) {
	var kj kindJSON
	if err := strict(raw, &kj); err != nil {
		return nil, invalidFile(at, err.Error())
	}
	k := &Kind{Name: name}
	if present(kj.Schema) {
		compiled, err := compile(name, kj.Schema)
		if err != nil {
			return nil, invalidFile(at+".schema", err.Error())
		}
		k.Schema, k.compiled = slices.Clone(kj.Schema), compiled
	}
	if present(kj.Defaults) {
		d, err := parseDefaults(at+".defaults", kj.Defaults)
		if err != nil {
			return nil, err
		}
		k.Defaults = d
	}
	if present(kj.Worker) {
		w, err := parseWorker(at+".worker", kj.Worker, base)
		if err != nil {
			return nil, err
		}
		k.Worker = w
	}
	return k, nil
}

func parseDefaults(at string, raw json.RawMessage) (Defaults, error) {
	var dj defaultsJSON
	var d Defaults
	if err := strict(raw, &dj); err != nil {
		return d, invalidFile(at, err.Error())
	}
	var err error
	if d.Lease, err = duration(at+".lease", dj.Lease, model.LeaseMax); err != nil {
		return d, err
	}
	if d.Lease != 0 {
		if err := model.CheckLease(d.Lease); err != nil {
			var v *model.ValidationError
			if errors.As(err, &v) {
				return d, invalidFile(at+".lease", v.Problem)
			}
			return d, invalidFile(at+".lease", err.Error())
		}
	}
	if d.Timeout, err = duration(at+".timeout", dj.Timeout, TimeoutMost); err != nil {
		return d, err
	}
	if dj.AttemptsMax != nil {
		if *dj.AttemptsMax < 1 || *dj.AttemptsMax > AttemptsMaxMost {
			return d, invalidFile(at+".attempts_max", fmt.Sprintf("must be from 1 to %d", AttemptsMaxMost))
		}
		d.AttemptsMax = *dj.AttemptsMax
	}
	if dj.Budget != nil {
		if *dj.Budget < 0 || *dj.Budget > model.CostBudgetMax {
			return d, invalidFile(at+".budget", fmt.Sprintf("must be from 0 to %d", model.CostBudgetMax))
		}
		d.CostBudget = *dj.Budget
	}
	if dj.StepsMax != nil {
		if *dj.StepsMax < 1 || *dj.StepsMax > model.StepsMaxLimit {
			return d, invalidFile(at+".steps_max", fmt.Sprintf("must be from 1 to %d", model.StepsMaxLimit))
		}
		d.StepsMax = *dj.StepsMax
	}
	return d, nil
}

func parseWorker(at string, raw json.RawMessage, base string) (*Worker, error) {
	var wj workerJSON
	if err := strict(raw, &wj); err != nil {
		return nil, invalidFile(at, err.Error())
	}
	w := &Worker{Dir: base}
	if err := checkArgv(at+".command", wj.Command); err != nil {
		return nil, err
	}
	w.Command = wj.Command
	switch ServiceKind(wj.Service) {
	case ServiceDedup, ServiceNone:
		if wj.Reconcile != nil {
			return nil, invalidFile(at+".reconcile", "only a queryable or fenced kind has a reconcile command")
		}
	case ServiceQueryable, ServiceFenced:
		if err := checkArgv(at+".reconcile", wj.Reconcile); err != nil {
			return nil, err
		}
		w.Reconcile = wj.Reconcile
	case "":
		return nil, invalidFile(at+".service", fmt.Sprintf("required: one of %v", ServiceKinds()))
	default:
		return nil, invalidFile(at+".service", fmt.Sprintf("must be one of %v", ServiceKinds()))
	}
	w.Service = ServiceKind(wj.Service)
	if wj.Dir != "" {
		w.Dir = wj.Dir
		if !filepath.IsAbs(w.Dir) {
			w.Dir = filepath.Join(base, w.Dir)
		}
	}
	grace, err := duration(at+".grace", wj.Grace, GraceMost)
	if err != nil {
		return nil, err
	}
	w.Grace = grace
	if w.Grace == 0 {
		w.Grace = GraceDefault
	}
	return w, nil
}

func checkArgv(at string, argv []string) error {
	switch {
	case len(argv) == 0:
		return invalidFile(at, "required: the program and its arguments, a non-empty array of strings")
	case len(argv) > ArgsMax:
		return invalidFile(at, fmt.Sprintf("%d arguments (limit %d)", len(argv), ArgsMax))
	case argv[0] == "":
		return invalidFile(at+"[0]", "the program may not be empty")
	}
	for i, a := range argv {
		if len(a) > ArgBytesMax || strings.IndexByte(a, 0) >= 0 {
			return invalidFile(fmt.Sprintf("%s[%d]", at, i), fmt.Sprintf("must be at most %d bytes, without NUL", ArgBytesMax))
		}
	}
	return nil
}

// duration parses an optional duration of at most most; "" is zero.
func duration(at, s string, most time.Duration) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > most {
		return 0, invalidFile(at, fmt.Sprintf("must be a positive duration of at most %s (such as \"30s\")", most))
	}
	return d, nil
}

// strict decodes one JSON object into v, refusing unknown members and
// anything after the object.
func strict(data []byte, v any) error {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return errors.New("must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return fmt.Errorf("%s: must be a JSON %s", typeErr.Field, jsonType(typeErr.Type.Kind().String()))
		}
		return errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return errors.New("trailing data after the object")
	}
	return nil
}

func jsonType(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "slice":
		return "array"
	case "int", "int64":
		return "integer"
	}
	return "value of another type"
}

// clip shortens a name an error quotes.
func clip(s string) string {
	if len(s) > KindNameMax {
		return s[:KindNameMax] + "..."
	}
	return s
}

func present(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && string(t) != "null"
}

func invalidFile(at, problem string) error {
	if at == "" {
		return fmt.Errorf("%w: %s", ErrInvalidFile, problem)
	}
	return fmt.Errorf("%w: %s: %s", ErrInvalidFile, at, problem)
}
