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
		{"HasSystemPrompt", flagHasSystemPrompt, Flags.HasSystemPrompt},
		{"HasTools", flagHasTools, Flags.HasTools},
		{"HasToolChoice", flagHasToolChoice, Flags.HasToolChoice},
		{"HasImages", flagHasImages, Flags.HasImages},
		{"StreamRequested", flagStreamRequested, Flags.StreamRequested},
		{"HasResponseFormat", flagHasResponseFormat, Flags.HasResponseFormat},
		{"HasMaxTokens", flagHasMaxTokens, Flags.HasMaxTokens},
		{"HasReasoningEffort", flagHasReasoningEffort, Flags.HasReasoningEffort},
		{"HasServiceTier", flagHasServiceTier, Flags.HasServiceTier},
		{"HasSeed", flagHasSeed, Flags.HasSeed},
		{"HasLogprobs", flagHasLogprobs, Flags.HasLogprobs},
		{"HasUserID", flagHasUserID, Flags.HasUserID},
		{"HasTemperature", flagHasTemperature, Flags.HasTemperature},
		{"HasTopP", flagHasTopP, Flags.HasTopP},
		{"HasStop", flagHasStop, Flags.HasStop},
		{"HasToolCalls", flagHasToolCalls, Flags.HasToolCalls},
		{"HasRefusal", flagHasRefusal, Flags.HasRefusal},
		{"ContentFiltered", flagContentFiltered, Flags.ContentFiltered},
		{"HasUsage", flagHasUsage, Flags.HasUsage},
		{"Truncated", flagTruncated, Flags.Truncated},
		{"HasCachedTokens", flagHasCachedTokens, Flags.HasCachedTokens},
		{"HasReasoningTokens", flagHasReasoningTokens, Flags.HasReasoningTokens},
		{"HasCostEstimate", flagHasCostEstimate, Flags.HasCostEstimate},
	} {
		if !tc.get(tc.bit) || tc.get(^tc.bit) || tc.get(0) {
			t.Errorf("%s: own bit %v, every other bit %v, none %v", tc.name, tc.get(tc.bit), tc.get(^tc.bit), tc.get(0))
		}
	}
}
