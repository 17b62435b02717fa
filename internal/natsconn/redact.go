package natsconn

import (
	"context"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
)

// Redact returns the comma-separated URL list with every password or
// token replaced by "xxxxx" (as nats.go's ConnectedUrlRedacted does).
// Strings that do not parse as URLs are returned with anything before an
// '@' redacted.
func Redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		parts[i] = redactOne(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

func redactOne(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		if at := strings.LastIndex(s, "@"); at >= 0 {
			return "xxxxx" + s[at:]
		}
		return s
	}
	if u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	} else {
		u.User = url.User("xxxxx") // a bare token
	}
	return u.String()
}

// RedactText removes from text every secret that the URL list carries
// (passwords and tokens), wherever it appears, and then what RedactAll
// removes.
func RedactText(text, urls string) string {
	for _, s := range secrets(urls) {
		text = strings.ReplaceAll(text, s, "xxxxx")
	}
	return RedactAll(text)
}

func secrets(urls string) []string {
	var out []string
	for _, p := range strings.Split(urls, ",") {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			continue
		}
		if pw, ok := u.User.Password(); ok && pw != "" {
			out = append(out, pw, url.QueryEscape(pw))
		} else if tok := u.User.Username(); tok != "" && !ok {
			out = append(out, tok)
		}
	}
	return out
}

var (
	// userinfo of any scheme://user[:secret]@ in free text.
	userinfoRE = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.\-]*://)([^\s/@,"'<>]+)@`)
	// nkey seeds: 'S', the key type, 56 more base32 characters.
	seedRE = regexp.MustCompile(`\bS[UAONCXP][A-Z2-7]{56}\b`)
)

// RedactAll removes what looks like a secret from free text: the user
// information of URLs (a user name is kept, a password or token is not)
// and nkey seeds. It is the last line of defence for log lines and error
// messages whose origin cellguard does not control.
func RedactAll(text string) string {
	text = userinfoRE.ReplaceAllStringFunc(text, func(m string) string {
		sub := userinfoRE.FindStringSubmatch(m)
		user, _, hasPass := strings.Cut(sub[2], ":")
		if hasPass {
			return sub[1] + user + ":xxxxx@"
		}
		return sub[1] + "xxxxx@"
	})
	return seedRE.ReplaceAllString(text, "xxxxx")
}

// RedactingHandler wraps h so that the message and every string value of
// a record pass through RedactAll before h sees them.
func RedactingHandler(h slog.Handler) slog.Handler { return redacting{h} }

type redacting struct{ h slog.Handler }

func (r redacting) Enabled(ctx context.Context, l slog.Level) bool { return r.h.Enabled(ctx, l) }

func (r redacting) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, RedactAll(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(redactAttr(a))
		return true
	})
	return r.h.Handle(ctx, out)
}

func (r redacting) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = redactAttr(a)
	}
	return redacting{r.h.WithAttrs(red)}
}

func (r redacting) WithGroup(name string) slog.Handler { return redacting{r.h.WithGroup(name)} }

func redactAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, RedactAll(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]any, len(g))
		for i, x := range g {
			red[i] = redactAttr(x)
		}
		return slog.Group(a.Key, red...)
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.String(a.Key, RedactAll(err.Error()))
		}
		return slog.String(a.Key, RedactAll(v.String()))
	}
	return slog.Attr{Key: a.Key, Value: v}
}
