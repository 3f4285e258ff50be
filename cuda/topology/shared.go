package topology

// SharedGPU is a GPU that two or more ranks run on: its PCI bus id and those ranks.
type SharedGPU struct {
	Bus   string
	Ranks []int
}

// SharedGPUs groups ranks by the GPU they run on, given each rank's bus id ("" for a
// rank on none): the GPUs that two or more share, in the order of their first rank.
func SharedGPUs(buses []string) []SharedGPU {
	byBus := map[string][]int{}
	var order []string
	for r, bus := range buses {
		if bus == "" {
			continue
		}
		if byBus[bus] == nil {
			order = append(order, bus)
		}
		byBus[bus] = append(byBus[bus], r)
	}
	var shared []SharedGPU
	for _, bus := range order {
		if len(byBus[bus]) >= 2 {
			shared = append(shared, SharedGPU{Bus: bus, Ranks: byBus[bus]})
		}
	}
	return shared
}
