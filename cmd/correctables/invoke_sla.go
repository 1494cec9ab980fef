package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
)

// slaFlags are invoke's --session and --sla (Pileus SOSP'13 §3).
type slaFlags struct {
	session string // file the session is kept in between invocations
	sla     string // cart, password, web, or an SLA JSON file
	pileus  bool   // one Get to Pileus's target instead of the incremental SLA

	// Loaded by check, before anything is sent.
	loadedSLA     client.SLA
	loadedSession *client.Session
}

func (f *slaFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.session, "session", "", "keep a session in this file (created if missing): each view prints the guarantees it satisfies for the session (read-my-writes, monotonic reads, causal, bounded staleness, strong)")
	cmd.Flags().StringVar(&f.sla, "sla", "", "get under a consistency-based SLA: cart, password, web or an SLA JSON file; prints the subSLA each view met and its utility")
	cmd.Flags().BoolVar(&f.pileus, "pileus", false, "with --sla: one Get to the target of highest expected utility (Pileus) instead of the incremental SLA")
}

func (f *slaFlags) active() bool { return f.session != "" || f.sla != "" }

// check validates the flags against the operation before anything is sent.
func (f *slaFlags) check(op client.Op, weak, strong, cpq bool) error {
	if !f.active() {
		if f.pileus {
			return errors.New("--pileus goes with --sla")
		}
		return nil
	}
	if cpq {
		return errors.New("--session and --sla do not go with --cpq")
	}
	if f.sla != "" {
		if op.Kind() != client.KindGet {
			return fmt.Errorf("--sla applies to get, not %s (SLAs govern reads, Pileus §3.3)", op.Kind())
		}
		if weak || strong {
			return errors.New("--sla chooses the replicas and levels: give neither --weak nor --strong")
		}
		var err error
		if f.loadedSLA, err = loadSLA(f.sla); err != nil {
			return err
		}
	}
	var err error
	f.loadedSession, err = loadSession(f.session)
	return err
}

// loadSLA reads a named SLA or an SLA file.
func loadSLA(arg string) (client.SLA, error) {
	if s, err := client.NamedSLA(arg); err == nil {
		return s, nil
	}
	data, err := os.ReadFile(arg)
	if err != nil {
		return client.SLA{}, fmt.Errorf("--sla %q is neither cart, password, web nor a readable SLA file: %w", arg, err)
	}
	s, err := client.ParseSLA(data)
	if err != nil {
		return client.SLA{}, fmt.Errorf("--sla %s: %w", arg, err)
	}
	return s, nil
}

// loadSession reads the session file, or starts a session if it does not
// exist.
func loadSession(path string) (*client.Session, error) {
	s := client.NewSession()
	if path == "" {
		return s, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("--session: %w", err)
	}
	if err := s.UnmarshalJSON(data); err != nil {
		return nil, fmt.Errorf("--session %s: not a session file: %w", path, err)
	}
	return s, nil
}

// saveSession writes the session file atomically.
func saveSession(path string, s *client.Session) error {
	if path == "" {
		return nil
	}
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".session-*")
	if err != nil {
		return fmt.Errorf("--session: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("--session: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("--session: %w", err)
	}
	return os.Rename(tmp.Name(), path)
}

// run invokes op within the session and/or under the SLA and prints each
// view with what it satisfies.
func (f *slaFlags) run(ctx context.Context, cmd *cobra.Command, c *client.Client, op client.Op, weak, strong, asJSON bool) error {
	sla, s := f.loadedSLA, f.loadedSession
	out := cmd.OutOrStdout()
	if f.sla == "" {
		var levels []correctable.Level
		switch {
		case weak:
			levels = []correctable.Level{correctable.Eventual}
		case strong:
			levels = []correctable.Level{correctable.Strong}
		}
		cor := c.InvokeSession(ctx, s, op, levels...)
		err := printSessionViews(out, op, cor, asJSON)
		return errors.Join(err, saveSession(f.session, s))
	}
	key := op.Key()
	if f.pileus {
		r, err := c.GetSLA(ctx, s, sla, key)
		if r.Replica != 0 {
			printSLAView(out, "final", sla, r, asJSON)
		}
		return errors.Join(err, saveSession(f.session, s))
	}
	cor := c.InvokeSLA(ctx, s, sla, key)
	for v := range cor.AllViews() {
		// An SLA's views rank its subSLAs, not the weak and strong
		// levels: the one the Get settles on is the final view.
		kind := "preliminary"
		if v.Final {
			kind = "final"
		}
		printSLAView(out, kind, sla, v.Value, asJSON)
	}
	return errors.Join(cor.Err(), saveSession(f.session, s))
}

// slaViewJSON is one SLA view as --json prints it.
type slaViewJSON struct {
	View       string  `json:"view"`
	SLA        string  `json:"sla"`
	SubSLA     int     `json:"subsla"`
	Met        string  `json:"met"`
	Utility    float64 `json:"utility"`
	Replica    uint64  `json:"replica"`
	ElapsedMS  float64 `json:"elapsed_ms"`
	Guarantees string  `json:"guarantees"`
	Result     any     `json:"result"`
}

func printSLAView(w io.Writer, kind string, sla client.SLA, r client.SLAResult, asJSON bool) {
	if asJSON {
		b, _ := json.Marshal(slaViewJSON{View: kind, SLA: sla.Name, SubSLA: r.SubSLA + 1, Met: r.Met.String(), Utility: r.Utility,
			Replica: r.Replica, ElapsedMS: float64(r.Latency.Microseconds()) / 1000, Guarantees: r.Guarantees.String(), Result: resultJSON(r.Result)})
		fmt.Fprintln(w, string(b))
		return
	}
	fmt.Fprintf(w, "%-11s %s#%d %-22s utility %-6g %9s  replica %d  %s  [%s]\n", kind, sla.Name, r.SubSLA+1, r.Met, r.Utility,
		r.Latency.Round(10*time.Microsecond), r.Replica, formatResult(client.Get(""), r.Result), r.Guarantees)
}

func printSessionViews(w io.Writer, op client.Op, cor *correctable.Correctable[client.Result], asJSON bool) error {
	for v := range cor.AllViews() {
		st, _ := client.StampOf(v)
		g, _ := client.GuaranteesOf(v)
		if asJSON {
			b, _ := json.Marshal(struct {
				View string `json:"view"`
				viewJSON
				Guarantees string `json:"guarantees"`
			}{viewName(v.Level), viewJSON{Level: v.Level.String(), Final: v.Final, Confirmed: v.Confirmed,
				ElapsedMS: float64(v.Elapsed.Microseconds()) / 1000, Result: resultJSON(v.Value), Replica: st.Replica}, g.String()})
			fmt.Fprintln(w, string(b))
			continue
		}
		kind := viewName(v.Level)
		val := formatResult(op, v.Value)
		if v.Confirmed {
			val = "confirmed"
		}
		fmt.Fprintf(w, "%-11s %-8s %9s  replica %d  %s  [%s]\n", kind, v.Level, v.Elapsed.Round(10*time.Microsecond), st.Replica, val, g)
	}
	return cor.Err()
}
