package main

// A global run's cluster has one manager (the manager supervisor of manager.go, one
// replica): a kill keeps it down for the fault's hold, and a cut drops its etcd traffic.

// halt SIGKILLs the running process and keeps the manager down until resume.
func (m *manager) halt() {
	m.mu.Lock()
	m.down = true
	p := m.cur
	m.mu.Unlock()
	if p != nil {
		p.kill()
	}
}

// resume lets the supervisor start the manager again.
func (m *manager) resume() {
	m.mu.Lock()
	m.down = false
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// cut drops every packet between the manager and every etcd member; heal ends it.
func (m *manager) cut() {
	for _, p := range m.proxies {
		p.blackhole()
	}
}

func (m *manager) heal() {
	for _, p := range m.proxies {
		p.heal()
	}
}
