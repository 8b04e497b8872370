package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/m2md/m2md/security"
)

// keysPollInterval is how often the keys file is read for changes.
const keysPollInterval = 2 * time.Second

// watchKeys reloads --openai-keys-file on SIGHUP and whenever its content
// changes: the new keys and limits apply to the next requests, open
// connections and requests in flight carry on. A file with an error is
// refused whole (logged) and the keys in use stay. It ends with stop.
func (e *openAIEdge) watchKeys(path string, orgSecrets map[string]security.Secret, log zerolog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(context.Background())
	e.unwatch = cancel
	e.watching.Add(1)
	last := fileSum(path)
	go func() {
		defer e.watching.Done()
		defer signal.Stop(hup)
		tick := time.NewTicker(keysPollInterval)
		defer tick.Stop()
		for {
			why := "SIGHUP"
			select {
			case <-ctx.Done():
				return
			case <-hup:
			case <-tick.C:
				sum := fileSum(path)
				if bytes.Equal(sum, last) {
					continue
				}
				why = "the file changed"
			}
			last = fileSum(path)
			keys, err := loadOpenAIKeys(path, orgSecrets)
			if err == nil {
				rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
				err = e.in.SetKeys(rctx, keys)
				rcancel()
			}
			if err != nil {
				log.Error().Err(err).Str("cause", why).Msg("--openai-keys-file not reloaded: the keys in use stay")
				continue
			}
			log.Info().Str("cause", why).Int("keys", keys.Len()).Msg("--openai-keys-file reloaded")
		}
	}()
}

// fileSum is the SHA-256 of path's content (nil when it cannot be read).
func fileSum(path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	s := sha256.Sum256(b)
	return s[:]
}
