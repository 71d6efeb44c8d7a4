package drift

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"egret.io/egret/internal/stamp"
)

// ListOptions select what ListPods returns.
type ListOptions struct {
	// Namespace limits the pods to one namespace; "" means all.
	Namespace string
	// EgretNamespace holds the Report's ConfigMap.
	EgretNamespace string
	// Stale keeps only the pods the Report finds stale.
	Stale bool
}

// PodList is what `egret pods` prints.
type PodList struct {
	// Report is when and by whom the pods were last compared; nil when no
	// report is published (the drift controller is not running).
	Report *ReportInfo `json:"report"`
	Pods   []ListedPod `json:"pods"`
	// Notes say what the list cannot show.
	Notes []string `json:"notes,omitempty"`
}

// ReportInfo identifies the Report a PodList was joined with.
type ReportInfo struct {
	Updated time.Time `json:"updated"`
	Leader  string    `json:"leader,omitempty"`
}

// ListedPod is one injected pod.
type ListedPod struct {
	Namespace string       `json:"namespace"`
	Name      string       `json:"name"`
	Workload  string       `json:"workload,omitempty"`
	Mode      string       `json:"mode"`
	Stale     []stamp.Part `json:"stale"`
	Created   time.Time    `json:"created"`
	// Stamp is the pod's stamp; nil when it has none.
	Stamp *stamp.Stamp `json:"stamp,omitempty"`
}

// ErrNoReport is ListPods' error when Stale is asked for and no Report is
// published.
var ErrNoReport = errors.New("no drift report")

// ListPods lists the pods egret injected (label stamp.Label), read now,
// with the parts the last Report finds stale. Pods the Report has not seen
// yet (created since) are listed as not stale.
func ListPods(ctx context.Context, r client.Reader, o ListOptions) (*PodList, error) {
	out := &PodList{Pods: []ListedPod{}}
	rep, err := ReadReport(ctx, r, o.EgretNamespace)
	switch {
	case errors.Is(err, ErrNoReport) && o.Stale:
		return nil, fmt.Errorf("%w in ConfigMap %s/%s: the webhook's elected leader publishes it (egret webhook, --namespace %s); is it running?",
			ErrNoReport, o.EgretNamespace, ConfigMapName, o.EgretNamespace)
	case errors.Is(err, ErrNoReport):
		out.Notes = append(out.Notes, fmt.Sprintf("no drift report in %s/%s: staleness unknown", o.EgretNamespace, ConfigMapName))
	case err != nil:
		return nil, err
	default:
		out.Report = &ReportInfo{Updated: rep.Updated, Leader: rep.Leader}
		if rep.MorePods > 0 {
			out.Notes = append(out.Notes, fmt.Sprintf("the report lists %d stale pods of %d: the others show as not stale", len(rep.Pods), rep.StalePods))
		}
		out.Notes = append(out.Notes, rep.Unknown...)
	}
	stale := map[types.NamespacedName]Pod{}
	if rep != nil {
		for _, p := range rep.Pods {
			stale[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = p
		}
	}
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	opts := []client.ListOption{client.HasLabels{stamp.Label}}
	if o.Namespace != "" {
		opts = append(opts, client.InNamespace(o.Namespace))
	}
	if err := r.List(ctx, l, opts...); err != nil {
		return nil, fmt.Errorf("list injected pods: %w", err)
	}
	for _, m := range l.Items {
		p := ListedPod{Namespace: m.Namespace, Name: m.Name, Mode: m.Labels[stamp.Label], Stale: []stamp.Part{}, Created: m.CreationTimestamp.Time}
		if s, err := stamp.Parse(m.Annotations[stamp.Annotation]); err == nil {
			p.Stamp = &s
		}
		if sp, ok := stale[types.NamespacedName{Namespace: m.Namespace, Name: m.Name}]; ok && sp.Created.Equal(m.CreationTimestamp.Time) {
			p.Stale, p.Workload = sp.Parts, sp.Workload.String()
		}
		if o.Stale && len(p.Stale) == 0 {
			continue
		}
		out.Pods = append(out.Pods, p)
	}
	slices.SortFunc(out.Pods, func(a, b ListedPod) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return out, nil
}

// ReadReport reads the published Report; ErrNoReport when there is none.
func ReadReport(ctx context.Context, r client.Reader, egretNamespace string) (*Report, error) {
	var cm corev1.ConfigMap
	err := r.Get(ctx, types.NamespacedName{Namespace: egretNamespace, Name: ConfigMapName}, &cm)
	if apierrors.IsNotFound(err) {
		return nil, ErrNoReport
	}
	if err != nil {
		return nil, fmt.Errorf("read configmap %s/%s: %w", egretNamespace, ConfigMapName, err)
	}
	return ParseReport(cm.Data[ReportKey])
}

// WritePods prints l as a table.
func WritePods(w io.Writer, l *PodList, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tMODE\tSTALE\tWORKLOAD\tAGE")
	for _, p := range l.Pods {
		st := "-"
		if len(p.Stale) > 0 {
			names := make([]string, len(p.Stale))
			for i, s := range p.Stale {
				names[i] = string(s)
			}
			st = strings.Join(names, ",")
		}
		wl := p.Workload
		if wl == "" {
			wl = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Namespace, p.Name, p.Mode, st, wl, age(now.Sub(p.Created)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if l.Report != nil {
		fmt.Fprintf(w, "(stale as of %s ago, compared by %s)\n", age(now.Sub(l.Report.Updated)), l.Report.Leader)
	}
	for _, n := range l.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	return nil
}

func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// Status is what `egret status` prints: the Report and the Lease holder.
type Status struct {
	// Leader is the holder of the webhook's Lease ("" when none).
	Leader string  `json:"leader"`
	Report *Report `json:"report"`
}

// ReadStatus reads the Lease lease and the Report in egretNamespace.
func ReadStatus(ctx context.Context, r client.Reader, egretNamespace, lease string) (*Status, error) {
	st := &Status{}
	var l coordinationv1.Lease
	if err := r.Get(ctx, types.NamespacedName{Namespace: egretNamespace, Name: lease}, &l); err == nil && l.Spec.HolderIdentity != nil {
		st.Leader = *l.Spec.HolderIdentity
	}
	rep, err := ReadReport(ctx, r, egretNamespace)
	if err != nil && !errors.Is(err, ErrNoReport) {
		return nil, err
	}
	st.Report = rep
	return st, nil
}

// WriteStatus prints s for people.
func WriteStatus(w io.Writer, s *Status, egretNamespace string, now time.Time) {
	leader := s.Leader
	if leader == "" {
		leader = "none"
	}
	fmt.Fprintf(w, "webhook leader:   %s\n", leader)
	r := s.Report
	if r == nil {
		fmt.Fprintf(w, "drift report:     none in %s/%s (the webhook's leader publishes it)\n", egretNamespace, ConfigMapName)
		return
	}
	fmt.Fprintf(w, "drift report:     %s ago, by %s\n", age(now.Sub(r.Updated)), r.Leader)
	fmt.Fprintf(w, "injected pods:    %d", r.InjectedPods)
	if r.Unstamped > 0 {
		fmt.Fprintf(w, " (%d without a stamp: injected before egret recorded one; restart them to compare)", r.Unstamped)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "stale pods:       %d", r.StalePods)
	var by []string
	for _, p := range stamp.Parts {
		if n := r.ByPart[p]; n > 0 {
			by = append(by, fmt.Sprintf("%s %d", p, n))
		}
	}
	if len(by) > 0 {
		fmt.Fprintf(w, " (%s)", strings.Join(by, ", "))
	}
	fmt.Fprintln(w)
	for _, u := range r.Unknown {
		fmt.Fprintln(w, "not compared:    ", u)
	}
	fmt.Fprintf(w, "restarts:         %s\n", r.Restarts.Mode)
	if c := r.Restarts.Current; c != nil {
		fmt.Fprintf(w, "restarting:       %s since %s ago\n", c.Ref, age(now.Sub(c.Started)))
	}
	if r.Restarts.Paused != "" {
		fmt.Fprintf(w, "paused:           %s\n", r.Restarts.Paused)
	}
	if len(r.Workloads) > 0 {
		fmt.Fprintln(w, "\nstale workloads:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  WORKLOAD\tSTALE PODS\tPARTS\tRESTART\tSTATE")
		for _, wl := range r.Workloads {
			parts := make([]string, len(wl.Parts))
			for i, p := range wl.Parts {
				parts[i] = string(p)
			}
			opt, state := wl.Restart, wl.State
			if opt == "" {
				opt, state = "not opted in", "-"
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\n", wl.Ref, wl.StalePods, strings.Join(parts, ","), opt, state)
		}
		tw.Flush()
		if r.MoreWorkloads > 0 {
			fmt.Fprintf(w, "  and %d more\n", r.MoreWorkloads)
		}
	}
	if len(r.Restarts.Recent) > 0 {
		fmt.Fprintln(w, "\nrecent restarts:")
		for _, rs := range r.Restarts.Recent {
			line := fmt.Sprintf("  %s ago  %s  %s", age(now.Sub(rs.Started)), rs.Ref, rs.Result)
			if rs.Error != "" {
				line += ": " + rs.Error
			}
			fmt.Fprintln(w, line)
		}
	}
}
