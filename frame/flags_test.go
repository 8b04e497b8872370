package frame

import "testing"

// Each accessor reports its own bit of the flags field, and no other.
func TestFlagAccessors(t *testing.T) {
	for _, tc := range []struct {
		name string
		bit  Flags
		get  func(Flags) bool
	}{
		{"Compressed", FlagCompressed, Flags.Compressed},
		{"HasExtensions", FlagHasExtensions, Flags.HasExtensions},
		{"HasSystemPrompt", FlagHasSystemPrompt, Flags.HasSystemPrompt},
		{"HasTools", FlagHasTools, Flags.HasTools},
		{"HasToolChoice", FlagHasToolChoice, Flags.HasToolChoice},
		{"HasImages", FlagHasImages, Flags.HasImages},
		{"StreamRequested", FlagStreamRequested, Flags.StreamRequested},
		{"HasResponseFormat", FlagHasResponseFormat, Flags.HasResponseFormat},
		{"HasMaxTokens", FlagHasMaxTokens, Flags.HasMaxTokens},
		{"HasReasoningEffort", FlagHasReasoningEffort, Flags.HasReasoningEffort},
		{"HasServiceTier", FlagHasServiceTier, Flags.HasServiceTier},
		{"HasSeed", FlagHasSeed, Flags.HasSeed},
		{"HasLogprobs", FlagHasLogprobs, Flags.HasLogprobs},
		{"HasUserID", FlagHasUserID, Flags.HasUserID},
		{"HasTemperature", FlagHasTemperature, Flags.HasTemperature},
		{"HasTopP", FlagHasTopP, Flags.HasTopP},
		{"HasStop", FlagHasStop, Flags.HasStop},
		{"HasToolCalls", FlagHasToolCalls, Flags.HasToolCalls},
		{"HasRefusal", FlagHasRefusal, Flags.HasRefusal},
		{"ContentFiltered", FlagContentFiltered, Flags.ContentFiltered},
		{"HasUsage", FlagHasUsage, Flags.HasUsage},
		{"Truncated", FlagTruncated, Flags.Truncated},
		{"HasCachedTokens", FlagHasCachedTokens, Flags.HasCachedTokens},
		{"HasReasoningTokens", FlagHasReasoningTokens, Flags.HasReasoningTokens},
		{"HasCostEstimate", FlagHasCostEstimate, Flags.HasCostEstimate},
	} {
		if !tc.get(tc.bit) || tc.get(^tc.bit) || tc.get(0) {
			t.Errorf("%s: own bit %v, every other bit %v, none %v", tc.name, tc.get(tc.bit), tc.get(^tc.bit), tc.get(0))
		}
	}
	if got := (FlagCompressed | FlagHasStop | 1<<15).Specific(); got != uint16(FlagHasStop|1<<15) {
		t.Errorf("Specific: %#04x", got)
	}
}
