"""Neural-network op families: conv, pool, norm, rnn, resize."""
