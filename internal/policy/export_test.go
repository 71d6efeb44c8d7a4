package policy

// SecretsHeld is Secrets.held, for the external tests.
func SecretsHeld(s *Secrets) int { return s.held() }
