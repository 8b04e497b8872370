package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// table is rows of cells, the first row the header, written as aligned
// text or as Markdown.
type table struct{ rows [][]string }

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) text(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	return tw.Flush()
}

func (t *table) markdown(w io.Writer) error {
	for i, r := range t.rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
		if i == 0 {
			seps := make([]string, len(r))
			seps[0] = "---"
			for j := 1; j < len(r); j++ {
				seps[j] = "---:"
			}
			fmt.Fprintf(w, "|%s|\n", strings.Join(seps, "|"))
		}
	}
	return nil
}

// WriteJSON writes the report as indented JSON.
func (r *CodecReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteCSV writes one line per document and form.
func (r *CodecReport) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"file", "class", "json_bytes", "form", "wire_bytes", "byte_ratio", "tokens", "encode_us", "decode_us"})
	for _, row := range r.Rows {
		tokens := ""
		if row.Tokens != nil {
			tokens = strconv.Itoa(*row.Tokens)
		}
		_ = cw.Write([]string{
			row.File, row.Class, strconv.Itoa(row.JSONBytes), row.Form, strconv.Itoa(row.WireBytes),
			strconv.FormatFloat(row.ByteRatio, 'f', 4, 64), tokens,
			strconv.FormatFloat(row.EncodeUS, 'f', 2, 64), strconv.FormatFloat(row.DecodeUS, 'f', 2, 64),
		})
	}
	cw.Flush()
	return cw.Error()
}

// summary finds a class's figures for a form.
func (r *CodecReport) summary(class, form string) (CodecSummary, bool) {
	for _, s := range r.Summary {
		if s.Class == class && s.Form == form {
			return s, true
		}
	}
	return CodecSummary{}, false
}

// WriteTable writes the summary as readable tables: bytes on the wire and
// tokens as a percentage of the JSON's, per size class, and the mean encode
// and decode times.
func (r *CodecReport) WriteTable(w io.Writer) error { return r.writeTables(w, false) }

// WriteMarkdown writes the same tables in Markdown.
func (r *CodecReport) WriteMarkdown(w io.Writer) error { return r.writeTables(w, true) }

func (r *CodecReport) writeTables(w io.Writer, markdown bool) error {
	counts := make([]string, 0, len(r.Classes))
	for _, c := range r.Classes {
		if s, ok := r.summary(c, formJSON); ok {
			counts = append(counts, fmt.Sprintf("%s %d", c, s.Files))
		}
	}
	fmt.Fprintf(w, "\nm2md bench codec: %d documents (%s); %d CPUs, %s\n", r.Files, strings.Join(counts, ", "), r.Machine.CPUs, r.Machine.CPUModel)

	matrix := func(title string, cell func(CodecSummary) string) error {
		fmt.Fprintf(w, "\n%s\n", title)
		var t table
		hdr := []string{"form"}
		for _, c := range r.Classes {
			s, _ := r.summary(c, formJSON)
			hdr = append(hdr, fmt.Sprintf("%s (%d)", c, s.Files))
		}
		t.add(hdr...)
		for _, f := range r.Forms {
			row := []string{f}
			for _, c := range r.Classes {
				s, ok := r.summary(c, f)
				v := "-"
				if ok {
					v = cell(s)
				}
				row = append(row, v)
			}
			t.add(row...)
		}
		if markdown {
			fmt.Fprintln(w)
			return t.markdown(w)
		}
		return t.text(w)
	}
	pct := func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }
	if err := matrix("Bytes on the wire, % of the JSON (total per class):", func(s CodecSummary) string { return pct(s.ByteRatio) }); err != nil {
		return err
	}
	if err := matrix("cl100k tokens of the wire form, % of the JSON's (text forms):", func(s CodecSummary) string {
		if s.TokenRatio == nil {
			return "-"
		}
		return pct(*s.TokenRatio)
	}); err != nil {
		return err
	}
	if err := matrix("Encode, mean µs per document:", func(s CodecSummary) string { return fmt.Sprintf("%.1f", s.EncodeUS) }); err != nil {
		return err
	}
	return matrix("Decode, mean µs per document:", func(s CodecSummary) string { return fmt.Sprintf("%.1f", s.DecodeUS) })
}
