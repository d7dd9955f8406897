package jit

func attentionCases() []opCase { return nil }
